"""Reranking the best candidates through Voyage's rerank API (POST /v1/rerank), behind a circuit breaker.

The key stays on the server, like the Voyage embedder's, and the request goes through the same client
(`ProviderApi`: key only in the Authorization header, provider bodies never shown). A rerank that fails or is
resting leaves the search's own order and says so in the answer's notice: it is never an error to the agent.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from server.index.embeddings.breaker import Breaker, through
from server.index.embeddings.remote import MALFORMED, ProviderApi, answer_cap

RERANK_CANDIDATES = 30  # the best candidates sent to the reranker; the rest follow them in the search's order
MAX_DOCUMENT_CHARS = 4000  # of one candidate's text: chunks stay far below it; a bound on the request's size


class Reranker(Protocol):
    provider: str
    model: str

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """A relevance score per document, in the documents' order; EmbeddingError on failure."""
        ...


class VoyageReranker(ProviderApi):
    provider = "voyage"
    path = "/v1/rerank"
    what = "rerank"

    def __init__(self, *, model: str, **api: Any) -> None:
        super().__init__(**api)
        self.model = model

    def __repr__(self) -> str:  # never the key
        return f"VoyageReranker(model={self.model!r}, url={self._url!r})"

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        body = {"query": query, "documents": [d[:MAX_DOCUMENT_CHARS] for d in documents], "model": self.model,
                "truncation": True}  # fmt: skip
        # A search waits for no retry: the breaker tries again later. An answer is a score per document.
        document = self.post(body, retries=0, max_bytes=answer_cap(len(documents), 1))
        try:
            rows = document["data"]
            scores: list[float | None] = [None] * len(documents)
            for row in rows:
                index, score = row["index"], float(row["relevance_score"])
                if not isinstance(index, int) or not 0 <= index < len(documents) or scores[index] is not None:
                    raise ValueError("rerank indexes are not a permutation of the documents")
                if not math.isfinite(score):
                    raise ValueError("a relevance score is not finite")
                scores[index] = score
            if any(score is None for score in scores):
                raise ValueError("a document has no score")
        except MALFORMED:
            raise self.malformed() from None
        return [float(score) for score in scores if score is not None]


class GuardedReranker:
    """A reranker behind its breaker: while it rests, calls fail at once instead of waiting on a provider down."""

    def __init__(self, inner: Reranker, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self.breaker = Breaker()
        self._clock = clock
        self._lock = threading.Lock()

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        name = f"{self.provider} rerank"
        return through(self.breaker, self._lock, self._clock, name, lambda: self.inner.rerank(query, documents))


def rerank_order(ranked: Sequence[int], scores: Sequence[float]) -> list[int]:
    """The first len(scores) of `ranked` by score (best first, ties in their old order), then the rest as they were."""
    head = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [ranked[i] for i in head] + list(ranked[len(scores) :])
