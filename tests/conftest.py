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


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`pytest.mark.anyio`) run on asyncio, as the server and the proxy do."""
    return "asyncio"


@pytest.fixture
def hashing_service(tmp_path: Path) -> Iterator[object]:
    """A memory service on a temporary data folder with the fast hashing embedder (for protocol-level tests)."""
    from server.memory.service import MemoryService
    from tests.fakes.embedder import HashingEmbedder

    running = MemoryService(tmp_path / "data", HashingEmbedder())
    yield running
    running.close()
