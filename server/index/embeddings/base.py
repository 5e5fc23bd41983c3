"""The embedder interface every provider implements, and the tokenizer interface the chunker sizes with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

InputKind = Literal["document", "query"]
Vectors = npt.NDArray[np.float32]


class Tokenizer(Protocol):
    """Counts and splits text in a model's own tokens, so chunks are sized in what the model really sees."""

    def count(self, text: str) -> int:
        """Number of tokens `text` becomes, without special tokens."""
        ...

    def split(self, text: str, max_tokens: int) -> list[tuple[int, int]]:
        """Character spans covering `text` in order, each at most `max_tokens` tokens."""
        ...


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors. Implementations batch internally and may block."""

    provider: str  # "local", "voyage", "openai": part of the embedding cache key
    model: str  # the provider's model id
    dimensions: int
    max_tokens: int  # the most tokens of one input the model reads; the chunker stays under it
    tokenizer: Tokenizer

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        """Embed `texts` in order; raises EmbeddingError on failure, never returns a partial result."""
        ...


def normalise(vectors: npt.NDArray[np.floating]) -> Vectors:
    """Scale rows to unit length (zero rows stay zero) so cosine similarity is a dot product."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError("expected a 2-D array of vectors")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: Vectors = (array / norms).astype(np.float32, copy=False)
    return normalised


def unusable(vectors: Vectors) -> str | None:
    """Why a model's answer cannot be stored, or None: a number that is not finite, or a row of zero length (it
    matches no query, so its chunk would never be found by meaning, and once cached it is never embedded again)."""
    if not np.isfinite(vectors).all():
        return "non-finite numbers"
    if not (np.linalg.norm(vectors, axis=1) > 0).all():
        return "a vector of zero length"
    return None
