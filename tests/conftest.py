"""Fixtures shared by the whole suite. The real embedding model is loaded once per test run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "demo-project"


@pytest.fixture(scope="session")
def local_embedder() -> Iterator[object]:
    """The real all-MiniLM-L6-v2, loaded once for every test that needs it."""
    from server.index.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.warm_up()
    yield embedder


@pytest.fixture(scope="session")
def tokenizer() -> object:
    from server.index.tokens import WordPieceTokenizer

    return WordPieceTokenizer.default()
