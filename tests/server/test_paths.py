"""The path gate: every path a caller names is a memory file that stays inside the mirror, or a clear error."""

from __future__ import annotations

import datetime as dt
import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.index.errors import InvalidArgumentError
from server.mirror.paths import normalise_memory_path, normalise_memory_prefix
from syncproto.paths import MAX_PATH_CHARS, daily_log_path, is_memory_file


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("MEMORY.md", "MEMORY.md"),
        ("memory.md", "memory.md"),
        ("memory/2024-05-01.md", "memory/2024-05-01.md"),
        ("memory/projects/billing/notes.md", "memory/projects/billing/notes.md"),
        ("./memory/a.md", "memory/a.md"),
        ("memory/caf\u0065\u0301.md", "memory/caf\u00e9.md"),  # NFD from a Mac becomes NFC
        ("memory/with space.md", "memory/with space.md"),
        ("memory/100%.md", "memory/100%.md"),
    ],
)
def test_memory_paths_are_accepted_in_canonical_form(raw: str, expected: str) -> None:
    assert normalise_memory_path(raw) == expected
    assert normalise_memory_path(expected) == expected


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("/memory/a.md", "absolute"),
        ("C:/memory/a.md", "absolute"),
        ("c:memory/a.md", "absolute"),
        ("memory\\a.md", "contains"),
        ("memory/../MEMORY.md", "'..'"),
        ("memory/../../etc/x.md", "'..'"),
        ("../memory/a.md", "'..'"),
        ("memory/./a.md", "'.'"),
        ("memory//a.md", "empty part"),
        ("memory/a.md/", "empty part"),
        ("memory/a\x00.md", "control"),
        ("memory/a\n.md", "control"),
        ("memory/a\u202e.md", "control"),  # right-to-left override
        ("memory/a\u200b.md", "control"),  # zero width space
        ("memory/%2e%2e/a.md", "percent"),
        ("memory/%2E%2E%2Fa.md", "percent"),
        ("memory%2fa.md", "percent"),
        ("memory/%5c..%5ca.md", "percent"),
        ("memory/a%00.md", "percent"),
        ("memory/.hidden.md", "hidden"),
        ("memory/.git/config.md", "hidden"),
        ("memory/\uff0e\uff0e/a.md", "'.'"),  # fullwidth dots
        ("memory/a.md:stream", "':'"),
        ("memory/what?.md", "'?'"),
        ("memory/CON.md", "reserved"),
        ("memory/trailing./a.md", "ends with"),
        (" memory/a.md", "space"),
        ("notes.md", "memory file"),
        ("memory/a.txt", "memory file"),
        ("memory/a.MD", "memory file"),
        ("memory", "memory file"),
        ("memory/", "empty part"),
        ("Memory/a.md", "memory file"),
        ("x" * (MAX_PATH_CHARS + 1), "longer"),
        ("memory/" + "a/" * 16 + "b.md", "parts"),
        ("memory/" + "a" * 300 + ".md", "longer than 255 bytes"),
    ],
)
def test_unsafe_or_foreign_paths_are_refused_with_a_reason(raw: str, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why) as caught:
        normalise_memory_path(raw)
    assert str(caught.value).startswith("path ")


def test_the_error_names_the_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^cursor "):
        normalise_memory_path("../x", argument="cursor")


@pytest.mark.parametrize("raw", [None, 3, b"memory/a.md", ["memory/a.md"]])
def test_non_strings_are_refused(raw: object) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a string"):
        normalise_memory_path(raw)  # type: ignore[arg-type]


def test_prefixes_follow_the_same_character_rules() -> None:
    assert normalise_memory_prefix(None) == ""
    assert normalise_memory_prefix("") == ""
    assert normalise_memory_prefix("memory/") == "memory/"
    assert normalise_memory_prefix("memory/2024-") == "memory/2024-"
    assert normalise_memory_prefix("MEM") == "MEM"
    for bad in ("../", "/etc", "memory/../", "memory/.git/", "memory/%2e%2e", "memory//"):
        with pytest.raises(InvalidArgumentError, match=r"^prefix "):
            normalise_memory_prefix(bad)


def test_daily_log_path_is_the_iso_date_under_memory() -> None:
    assert daily_log_path(dt.date(2024, 5, 1)) == "memory/2024-05-01.md"
    assert is_memory_file(daily_log_path(dt.date(1999, 12, 31)))


# property tests ----------------------------------------------------------------------------------------

_ALPHABET = st.sampled_from(
    [*"./\\%:?*ab mMemoryEMORY.md2e5cf0\x00\n\t\u202e\uff0e~-_é", "%2e", "%2f", "%5c", "..", "memory/", "MEMORY.md"]
)
_PATHS = st.one_of(
    st.text(max_size=80),
    st.lists(_ALPHABET, max_size=40).map("".join),
    st.lists(st.sampled_from(["memory", "..", ".", "", "a.md", "b", "%2e%2e", "\u2025", ".x"]), max_size=8).map(
        "/".join
    ),
)


@settings(max_examples=3000, deadline=None)
@given(_PATHS)
def test_any_input_is_an_error_or_a_canonical_path_inside_the_root(raw: str) -> None:
    try:
        path = normalise_memory_path(raw)
    except InvalidArgumentError:
        return
    root = "/srv/mirror/files"
    joined = posixpath.normpath(posixpath.join(root, path))
    assert joined.startswith(root + "/")
    assert joined == f"{root}/{path}"  # nothing to normalise away: no '.', '..', '//'
    assert normalise_memory_path(path) == path
    assert is_memory_file(path)
    assert not any(part.startswith(".") for part in path.split("/"))
    assert "%" not in path or not any(
        path[i + 1 : i + 3].lower() in ("2e", "2f", "5c", "00") for i, ch in enumerate(path) if ch == "%"
    )


@settings(max_examples=1000, deadline=None)
@given(_PATHS)
def test_any_prefix_is_an_error_or_stays_inside_the_root(raw: str) -> None:
    try:
        prefix = normalise_memory_prefix(raw)
    except InvalidArgumentError:
        return
    root = "/srv/mirror/files"
    assert posixpath.normpath(posixpath.join(root, prefix + "x")).startswith(root + "/")
