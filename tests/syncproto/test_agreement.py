"""Server and proxy apply the one protocol: they accept and refuse the same paths and the same file sizes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from client_proxy.sync.scope import DEFAULT_MAX_FILE_BYTES, content_problem, name_problem
from server.index.errors import InvalidArgumentError
from server.mirror.mirror import Mirror
from server.mirror.paths import normalise_memory_path
from syncproto.wire import MAX_FILE_BYTES

_PIECES = st.sampled_from(
    [
        *'./\\%:?*<>|"ab mMeoryEMORY.md2e5cf0\x00\n\t\u202e\u200b\uff0e~-_é',
        "e\u0301",
        "%2e",
        "%2f",
        "..",
        "./",
        "//",
        "memory/",
        "MEMORY.md",
        "memory.md",
        "sessions/",
        "CON",
        ".md",
        "x" * 120,
    ]
)
_PATHS = st.one_of(st.lists(_PIECES, max_size=12).map("".join), st.text(max_size=40))


def _server_accepts(raw: str) -> bool:
    """The server takes `raw` as a memory file under exactly this name."""
    try:
        return normalise_memory_path(raw) == raw
    except InvalidArgumentError:
        return False


@settings(max_examples=600, deadline=None)
@given(_PATHS)
@example("memory/notes.md")
@example("./memory/notes.md")
@example("memory/caf\u0065\u0301.md")
@example("memory/a:b.md")
@example("sessions/alice/2024-05-01-abc.md")
def test_the_server_and_the_proxy_accept_and_refuse_the_same_paths(raw: str) -> None:
    assert _server_accepts(raw) == (name_problem(raw) is None)


@settings(max_examples=300, deadline=None)
@given(_PATHS)
def test_a_name_the_server_would_store_elsewhere_is_synced_under_that_name(raw: str) -> None:
    try:
        canonical = normalise_memory_path(raw)
    except InvalidArgumentError:
        return
    assert name_problem(canonical) is None


def test_both_sides_use_the_protocols_file_cap() -> None:
    assert DEFAULT_MAX_FILE_BYTES == MAX_FILE_BYTES


@pytest.fixture(scope="module")
def mirror():
    with tempfile.TemporaryDirectory() as folder:
        opened = Mirror(Path(folder) / "index")
        yield opened
        opened.close()


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(MAX_FILE_BYTES - 3, MAX_FILE_BYTES + 3), st.integers(0, MAX_FILE_BYTES + 4096)))
@example(MAX_FILE_BYTES)
@example(MAX_FILE_BYTES + 1)
def test_the_server_and_the_proxy_accept_and_refuse_the_same_sizes(mirror: Mirror, size: int) -> None:
    text = ("a" * 63 + "\n") * (size // 64) + "b" * (size % 64)
    try:
        mirror.write("memory/sized.md", text, caller="alice")
        server_ok = True
    except InvalidArgumentError:
        server_ok = False
    assert server_ok == (content_problem(text.encode("utf-8"), DEFAULT_MAX_FILE_BYTES) is None)
