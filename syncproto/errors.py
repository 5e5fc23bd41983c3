"""The sync protocol's errors: one root. Messages name the rule broken, never file content or a secret."""

from __future__ import annotations


class ProtocolError(ValueError):
    """Root of every error the protocol's rules raise: something sent or named does not follow the protocol."""


class PathRefused(ProtocolError):
    """A path that is not a memory file (or a session transcript where those are allowed), or breaks a name rule."""


class MessageRefused(ProtocolError):
    """A request body or a query parameter that does not have the protocol's shape."""
