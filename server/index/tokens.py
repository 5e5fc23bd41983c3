"""Tokenizers the chunker sizes chunks with: the local model's own WordPiece vocabulary."""

from __future__ import annotations

import functools
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from server.index.model_package import packaged_model_dir


class WordPieceTokenizer:
    """Counts and splits in the WordPiece tokens of all-MiniLM-L6-v2 (fast Rust tokenizer, no torch)."""

    def __init__(self, tokenizer_json: Path) -> None:
        tokenizer = HFTokenizer.from_file(str(tokenizer_json))
        # The chunker wants every token of a text, never the model's truncated view of it.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    @classmethod
    @functools.cache
    def default(cls) -> WordPieceTokenizer:
        """The tokenizer shipped with the packaged all-MiniLM-L6-v2 model."""
        return cls(packaged_model_dir() / "tokenizer.json")

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def split(self, text: str, max_tokens: int) -> list[tuple[int, int]]:
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        if not offsets:
            return [(0, len(text))] if text else []
        spans: list[tuple[int, int]] = []
        start = 0
        for first in range(max_tokens, len(offsets), max_tokens):
            # Cut where the next window's first token begins; the whitespace before it stays with the left span.
            cut = offsets[first][0]
            spans.append((start, cut))
            start = cut
        spans.append((start, len(text)))
        return [span for span in spans if span[1] > span[0]]
