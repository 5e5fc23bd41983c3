"""Errors of the index engine. One root, a few meaningful subclasses; messages are safe to show users."""

from __future__ import annotations


class MemoryServerError(Exception):
    """Root of every error the server raises on purpose (`server.errors` holds the tree and how each error reaches
    a caller; the root lives here, at the bottom layer, so the engine's errors hang under it without a circle)."""


class EngineError(MemoryServerError):
    """Root of every error the index engine raises on purpose (and of the memory service's refusals)."""


class InvalidArgumentError(EngineError):
    """A caller passed something the engine will not accept (empty query, absurd limit, bad name)."""


class UnknownIndexError(EngineError):
    """The named index does not exist under the data directory."""


class CorruptIndexError(EngineError):
    """The database file is damaged; it can be rebuilt from the markdown files."""


class EmbeddingError(EngineError):
    """An embedding provider failed; the message never contains an API key. `retry_after` is the provider's own
    word on when to come back (seconds), `refused` that it refused the key: a circuit breaker reads both."""

    def __init__(self, message: str, *, retry_after: float | None = None, refused: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.refused = refused


class EmbeddingUnavailableError(EmbeddingError):
    """A provider cannot be used at all here (no key, no model files, bad checksum)."""
