"""The configured embedding providers in their fallback order, each behind a circuit breaker.

An index's vectors belong to one model (its live vector table); a provider serves them only while it is that
model and its breaker lets calls through. So vectors of two models never meet: when the provider of the live
vectors fails, searches answer by keyword and new chunks wait for their vectors, and once it has been down for
`failover_after` seconds the next provider in the order becomes the one to build vectors for (beside the live
ones, swapped in when complete). When an earlier provider recovers, it is preferred again: its vectors are rebuilt,
mostly from the embedding cache, while the fallback's keep serving searches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from server.index.embeddings.base import Embedder, InputKind, Tokenizer, Vectors
from server.index.embeddings.breaker import Breaker, through

FAILOVER_AFTER = 60.0  # seconds a provider fails before the next one's vectors are built


@dataclass(frozen=True)
class ProviderState:
    """One provider as `memory_status` shows it."""

    provider: str
    model: str
    state: str  # "ok" or "failing"
    detail: str | None = None  # the last failure and the next trial


class GuardedEmbedder:
    """One provider behind its breaker: the same identity, calls refused at once while the breaker is open."""

    def __init__(self, inner: Embedder, breaker: Breaker, clock: Callable[[], float], lock: threading.Lock) -> None:
        self.inner = inner
        self.breaker = breaker
        self._clock = clock
        self._lock = lock
        # The identity of the vectors it makes, fixed for its life (an API's dimensions are probed before).
        self.provider: str = inner.provider
        self.model: str = inner.model
        self.dimensions: int = inner.dimensions
        self.max_tokens: int = inner.max_tokens
        self.tokenizer: Tokenizer = inner.tokenizer

    def available(self) -> bool:
        with self._lock:
            return self.breaker.available(self._clock())

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        return through(self.breaker, self._lock, self._clock, self.provider, lambda: self.inner.embed(texts, kind=kind))

    def try_once(self) -> None:
        """Before a rebuild sends batches to a provider that failed before: one short request, without the
        provider's retries (a query's), so a provider still down costs one attempt, not a batch's backoff.
        EmbeddingError (and a longer rest) when it still fails."""
        with self._lock:
            failed_before = self.breaker.failures > 0
        if failed_before:
            self.embed(["are you back?"], kind="query")

    def warm_up(self) -> None:
        warm_up = getattr(self.inner, "warm_up", None)
        if callable(warm_up):
            warm_up()


@dataclass
class ProviderChain:
    """The providers in fallback order. `clock` is monotonic seconds (a test passes its own)."""

    members: list[GuardedEmbedder] = field(default_factory=list)
    failover_after: float = FAILOVER_AFTER
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def of(
        cls,
        providers: Sequence[Embedder],
        *,
        failover_after: float = FAILOVER_AFTER,
        clock: Callable[[], float] = time.monotonic,
        failures: Sequence[str | None] = (),
    ) -> ProviderChain:
        """A chain of `providers`; `failures[i]`, when given, is why provider i failed already (a probe at start)."""
        lock = threading.Lock()
        chain = cls(failover_after=failover_after, clock=clock)
        for number, provider in enumerate(providers):
            breaker = Breaker()
            failure = failures[number] if number < len(failures) else None
            if failure is not None:  # a provider down at start is bypassed at once, as if down for long already
                breaker.failed(clock(), failure)
                breaker.failing_since = clock() - failover_after
            chain.members.append(GuardedEmbedder(provider, breaker, clock, lock))
        return chain

    def __bool__(self) -> bool:
        return bool(self.members)

    def serving(self, provider: str, model: str, dimensions: int) -> GuardedEmbedder | None:
        """The provider of vectors of this model, while its breaker lets calls through."""
        for member in self.members:
            if (member.provider, member.model, member.dimensions) == (provider, model, dimensions):
                return member if member.available() else None
        return None

    def preferred(self) -> GuardedEmbedder | None:
        """The provider to build vectors for: the first one not failing for longer than `failover_after` (a
        provider failing for less is still preferred: a short outage must not rebuild an index)."""
        now = self.clock()
        for member in self.members:
            with member._lock:
                if member.breaker.available(now) or member.breaker.down_for(now) < self.failover_after:
                    return member
        return None

    def states(self) -> list[ProviderState]:
        now = self.clock()
        states = []
        for member in self.members:
            with member._lock:
                detail = member.breaker.describe(now)
            states.append(ProviderState(member.provider, member.model, "failing" if detail else "ok", detail))
        return states

    def failures(self) -> str | None:
        """Why the failing providers fail, in one line; None when none does."""
        failing = [f"{s.provider}: {s.detail}" for s in self.states() if s.detail]
        return "; ".join(failing) or None


def as_chain(embedder: Embedder | ProviderChain | None) -> ProviderChain:
    """What the engine holds: a chain as it is, one provider as a chain of one, none as an empty chain."""
    if isinstance(embedder, ProviderChain):
        return embedder
    return ProviderChain.of([] if embedder is None else [embedder])
