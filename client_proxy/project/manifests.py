"""A project's manifests as `memory-proxy init` reads them, and the helpers that take them apart.

`read_project_files` is the only I/O: it reads at most `MAX_MANIFEST_BYTES` of each manifest in `MANIFESTS`, notes
the ones that are there but cannot be read (no permission, a folder or a FIFO by that name), and notes which of
`MARKERS` (lockfiles, wrappers) exist. The helpers never raise anything but `UnparsedError`, which `detect_stack`
reports as "could not be parsed" (or "could not be read").
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from syncproto.content import NotRegularFile, open_regular, read_capped

MAX_MANIFEST_BYTES: Final = 256 * 1024
# Read (at most MAX_MANIFEST_BYTES each), in the order their ecosystems are listed:
MANIFESTS: Final = tuple(
    "package.json Cargo.toml go.mod pyproject.toml requirements.txt composer.json Gemfile pom.xml build.gradle "
    "build.gradle.kts settings.gradle settings.gradle.kts".split()
)
# Only looked for (lockfiles, wrappers):
MARKERS: Final = tuple(
    "tsconfig.json package-lock.json pnpm-lock.yaml yarn.lock bun.lockb bun.lock uv.lock poetry.lock pdm.lock "
    "Pipfile setup.py mvnw gradlew".split()
)
MAX_VALUE = 80  # a name or version taken from a manifest, as shown


@dataclass(frozen=True)
class ProjectFiles:
    """What `read_project_files` saw: manifest contents (maybe cut at the limit), the names that exist, and why
    each manifest that is there could not be read."""

    contents: Mapping[str, bytes] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    truncated: frozenset[str] = frozenset()
    unreadable: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, files: Mapping[str, bytes | str], markers: Iterable[str] = ()) -> ProjectFiles:
        """For tests and callers holding the text already."""
        contents = {name: data.encode() if isinstance(data, str) else data for name, data in files.items()}
        return cls(contents, frozenset(contents) | frozenset(markers))


def read_project_files(project: Path, limit: int = MAX_MANIFEST_BYTES) -> ProjectFiles:
    """The manifests at the root of `project`, each read up to `limit` bytes; one that cannot be read is noted
    with the reason, and a symlink out of the project is left out."""
    root = Path(os.path.realpath(project))
    contents: dict[str, bytes] = {}
    truncated: set[str] = set()
    unreadable: dict[str, str] = {}
    for name in MANIFESTS:
        try:
            data = read_regular(root, name, limit)
        except OSError as exc:
            unreadable[name] = "not a regular file" if isinstance(exc, NotRegularFile) else exc.strerror or str(exc)
            continue
        if data is not None:
            contents[name] = data[:limit]
            if len(data) > limit:
                truncated.add(name)
    present = frozenset(contents) | frozenset(unreadable) | {name for name in MARKERS if os.path.lexists(root / name)}
    return ProjectFiles(contents, present, frozenset(truncated), unreadable)


def pairs(spec: str) -> tuple[tuple[str, str], ...]:
    """`"a=A, b=B"` -> `(("a", "A"), ("b", "B"))`: the hint tables below, one line for several entries."""
    return tuple((key.strip(), label.strip()) for key, _, label in (item.partition("=") for item in spec.split(",")))


class UnparsedError(Exception):
    """A manifest that is there but does not parse; `detect_stack` turns it into `Ecosystem.problem`."""

    def __init__(self, manifest: str, reason: str) -> None:
        super().__init__(reason)
        self.manifest = manifest


def unparsed(name: str, files: ProjectFiles, why: str) -> UnparsedError:
    cut = f"; only its first {MAX_MANIFEST_BYTES // 1024} KiB were read" if name in files.truncated else ""
    return UnparsedError(name, f"{name} could not be parsed ({why[:120]}{cut})")


def text_of(files: ProjectFiles, name: str) -> str | None:
    if name in files.unreadable:
        raise UnparsedError(name, f"{name} could not be read ({files.unreadable[name]})")
    data = files.contents.get(name)
    if data is None:
        return None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise unparsed(name, files, "not UTF-8") from None


def json_of(files: ProjectFiles, name: str) -> dict[str, object] | None:
    text = text_of(files, name)
    if text is None:
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise unparsed(name, files, str(exc)) from None
    if not isinstance(document, dict):
        raise unparsed(name, files, "not a JSON object")
    return document


def toml_of(files: ProjectFiles, name: str) -> dict[str, object] | None:
    text = text_of(files, name)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise unparsed(name, files, str(exc)) from None


def table_of(document: Mapping[str, object], key: str) -> dict[str, object]:
    value = document.get(key)
    return value if isinstance(value, dict) else {}


def keys_of(document: Mapping[str, object], *tables: str) -> set[str]:
    return {str(name).lower() for table in tables for name in table_of(document, table)}


def strings_of(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def hints_of(names: set[str], table: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(label for key, label in table if key in names))


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2]


def clean(value: object) -> str | None:
    """A manifest's value as one short line of printable text, safe inside markdown inline code; else None."""
    if not isinstance(value, str):
        return None
    text = "".join(ch for ch in value if ch.isprintable()).replace("`", "'").strip()
    return text[:MAX_VALUE] or None


def read_regular(root: Path, name: str, limit: int) -> bytes | None:
    """Up to `limit` + 1 bytes of the regular file `name` in `root` (one more shows it is over); None when there is
    none, or it is a symlink out of `root`. OSError when it is there but cannot be read: `NotRegularFile` for a
    folder or a FIFO (opened without blocking), `PermissionError` and the like as the system said."""
    real = os.path.realpath(root / name)
    if not Path(real).is_relative_to(root):
        return None
    try:
        fd, _ = open_regular(real)
    except FileNotFoundError:
        return None
    try:
        return read_capped(fd, limit)
    finally:
        os.close(fd)
