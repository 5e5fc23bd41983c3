"""The protocol's path gate (`syncproto.paths`) as the server uses it: a refused path is an InvalidArgumentError.

Every path a caller names passes here before it reaches the mirror or the index; the rules themselves live in
`syncproto.paths`, the one copy both sides import.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from server.errors import InvalidArgumentError
from syncproto import paths
from syncproto.errors import PathRefused
from syncproto.names import find_collision


def normalise_memory_path(raw: str, *, argument: str = "path") -> str:
    """The canonical form of a memory file path, or InvalidArgumentError naming `argument` and the rule broken."""
    try:
        return paths.normalise_memory_path(raw, argument=argument)
    except PathRefused as exc:
        raise InvalidArgumentError(str(exc)) from None


def normalise_mirror_path(raw: str, *, argument: str = "path") -> str:
    """The canonical form of a path the mirror holds: a memory file or a session transcript."""
    try:
        return paths.normalise_mirror_path(raw, argument=argument)
    except PathRefused as exc:
        raise InvalidArgumentError(str(exc)) from None


def normalise_memory_prefix(raw: str | None, *, argument: str = "prefix") -> str:
    """A path prefix for filters (`memory/`, `memory/2024-`); empty or None means everything."""
    try:
        return paths.normalise_memory_prefix(raw, argument=argument)
    except PathRefused as exc:
        raise InvalidArgumentError(str(exc)) from None


def session_file_path(caller: str, day: dt.date, session: str, part: int) -> str:
    """Where part `part` (from 1) of a caller's session transcript lives in the mirror."""
    try:
        return paths.session_file_path(caller, day, session, part)
    except PathRefused as exc:
        raise InvalidArgumentError(str(exc)) from None


def refuse_collision(path: str, live: Iterable[str]) -> None:
    """InvalidArgumentError when a live file is the same file as `path` on a case-insensitive laptop disk."""
    other = find_collision(path, live)
    if other is not None:
        raise InvalidArgumentError(
            f"{path} would be the same file as {other} on macOS and Windows laptops (names differing only in "
            f"case or Unicode form); use {other}, or another name"
        )
