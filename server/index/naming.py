"""Index names and the folders they become."""

from __future__ import annotations

import re
from pathlib import Path

from server.index.errors import InvalidArgumentError

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def validate_name(name: str) -> str:
    """Index names become folder names: lowercase letters, digits, `_.-`, starting with a letter or digit."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InvalidArgumentError(
            "index names are 1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
        )
    return name


def index_dir(data_dir: Path, name: str) -> Path:
    return data_dir / "indexes" / validate_name(name)
