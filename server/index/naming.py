"""Index names, the folders they become, and the `index.json` each folder holds."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from server.index.errors import InvalidArgumentError

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
FILES_FOLDER = "files"  # the folder of an index's files the service keeps beside its database (Mirror.files_dir)


def validate_name(name: str) -> str:
    """Index names become folder names: lowercase letters, digits, `_.-`, starting with a letter or digit."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InvalidArgumentError(
            "index names are 1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
        )
    return name


def index_dir(data_dir: Path, name: str) -> Path:
    return data_dir / "indexes" / validate_name(name)


def read_info(directory: Path) -> dict[str, Any] | None:
    """`index.json` of an index's folder, read without repairing it; None when it is missing, unreadable or not a
    JSON object (the engine rewrites such a one from the folder when it next opens the index)."""
    try:
        info = json.loads((directory / "index.json").read_text("utf-8"))
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        return None
    return info if isinstance(info, dict) else None


def write_info(directory: Path, value: dict[str, Any]) -> None:
    """Replace `index.json` in an index's folder in one rename, the bytes and the rename on disk before it returns
    (a power cut must not leave an empty description)."""
    path = directory / "index.json"
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps(value, indent=2) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
