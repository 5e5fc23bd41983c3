"""A deterministic stand-in for a second embedding model: hashed bag of words, for model-switch tests."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from server.index.embeddings.base import InputKind, Vectors, normalise
from server.index.tokens import WordPieceTokenizer


class HashingEmbedder:
    provider = "test"
    max_tokens = 254

    def __init__(self, model: str = "hashing-v1", dimensions: int = 64) -> None:
        self.model = model
        self.dimensions = dimensions
        self.tokenizer = WordPieceTokenizer.default()
        self.calls: list[int] = []  # how many texts each call embedded
        self.queries: list[list[str]] = []  # the texts of each call for a query
        self.fail = False

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        from server.index.errors import EmbeddingError

        if self.fail:
            raise EmbeddingError("the test embedder is switched off")
        self.calls.append(len(texts))
        if kind == "query":
            self.queries.append(list(texts))
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest[:4], "little") % self.dimensions] += 1.0
        return normalise(out)

    @property
    def embedded(self) -> int:
        return sum(self.calls)
