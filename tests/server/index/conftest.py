"""What the engine's tests share: the example notes, copied for each test to change as it likes, and an index of
them on the hashing embedder (a module that needs another model defines its own `index`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.index.engine import MemoryIndex
from tests.conftest import EXAMPLE
from tests.fakes.embedder import HashingEmbedder


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the example notes (examples/demo-project), the test's own."""
    target = tmp_path / "project"
    shutil.copytree(EXAMPLE, target)
    return target


@pytest.fixture
def index(tmp_path: Path, folder: Path) -> Iterator[MemoryIndex]:
    """The example notes indexed with the hashing embedder (no model load)."""
    opened = MemoryIndex.open(tmp_path / "data", "live", HashingEmbedder(), create=True)
    opened.index(folder)
    yield opened
    opened.close()
