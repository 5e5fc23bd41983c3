"""Extra memory folders: one plain folder name beside `memory/`, under the same path rules, set for the process;
both sides then ask the same `is_memory_file`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from syncproto.errors import PathRefused
from syncproto.paths import (
    extra_folder_problem,
    memory_folders,
    normalise_memory_path,
    set_extra_folders,
    synced_path_problem,
)


@pytest.fixture
def notes() -> Iterator[None]:
    set_extra_folders(["notes", "décisions"])
    try:
        yield
    finally:
        set_extra_folders(())


def test_files_of_an_extra_folder_are_memory_files_on_both_sides_once_set(notes):
    assert memory_folders() == ("memory", "notes", "décisions")
    assert normalise_memory_path("notes/design/cache.md") == "notes/design/cache.md"
    assert synced_path_problem("notes/a.md") is None and synced_path_problem("décisions/x.md") is None
    assert synced_path_problem("drafts/a.md") is not None and synced_path_problem("notes/a.txt") is not None
    with pytest.raises(PathRefused, match="hidden"):
        normalise_memory_path("notes/.private.md")  # the same rules as memory/


def test_without_extra_folders_only_memory_paths_pass():
    assert memory_folders() == ("memory",)
    with pytest.raises(PathRefused, match="must name a memory file"):
        normalise_memory_path("notes/a.md")


def test_a_path_cached_before_the_folders_changed_is_judged_again(notes):
    assert normalise_memory_path("notes/again.md") == "notes/again.md"
    set_extra_folders(())
    with pytest.raises(PathRefused):
        normalise_memory_path("notes/again.md")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("memory", "already a memory path or reserved"),
        ("Memory", "already a memory path or reserved"),
        ("sessions", "already a memory path or reserved"),
        ("MEMORY.md", "already a memory path or reserved"),
        ("docs/adr", "one folder name beside memory/"),
        ("../up", "'.' or '..'"),
        (".hidden", "hidden"),
        ("con", "reserved device name"),
        ("ab:c", "contains ':'"),
        ("", "is empty"),
    ],
)
def test_a_folder_that_breaks_the_rules_cannot_be_an_extra_folder(name, problem):
    assert problem in (extra_folder_problem(name) or "")
    with pytest.raises(PathRefused, match="extra folders refused"):
        set_extra_folders([name])
    assert memory_folders() == ("memory",)
