"""The laptop's timings: how long the watcher lets a burst of saves settle, and how much a session transcript grows
before it is uploaded again.

Each is `MEMORY_PROXY_<KEY>` in the environment, else `<key>` in proxy.toml, else the default; the environment wins,
as for the server's settings. A value out of range is a ConfigError naming the variable or the file and key.
`memory-proxy show` prints each with where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from client_proxy.errors import ConfigError
from syncproto.numbers import parse_whole

# key -> (default, lowest, highest, unit)
TUNING_FIELDS: Final[Mapping[str, tuple[int, int, int, str]]] = {
    "watch_debounce_ms": (200, 10, 60_000, "milliseconds without saves before a burst counts as over"),
    "transcripts_delta_bytes": (64 * 1024, 1024, 16 * 1024 * 1024, "bytes a session grows before it is sent"),
    "transcripts_delta_lines": (40, 1, 100_000, "complete lines a session grows before it is sent"),
}


def env_variable(key: str) -> str:
    """`watch_debounce_ms` -> `MEMORY_PROXY_WATCH_DEBOUNCE_MS`."""
    return f"MEMORY_PROXY_{key.upper()}"


def file_values(document: Mapping[str, object], path: Path) -> dict[str, int]:
    """The timing keys proxy.toml sets, each checked (a ConfigError names the file and the key)."""
    values: dict[str, int] = {}
    for key in TUNING_FIELDS:
        if key in document:
            value = document[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{path}: {key} must be a whole number")
            values[key] = _in_range(key, value, f"{path}: {key}")
    return values


@dataclass(frozen=True)
class LaptopTuning:
    watch_debounce_ms: int = TUNING_FIELDS["watch_debounce_ms"][0]
    transcripts_delta_bytes: int = TUNING_FIELDS["transcripts_delta_bytes"][0]
    transcripts_delta_lines: int = TUNING_FIELDS["transcripts_delta_lines"][0]
    origins: Mapping[str, str] = field(default_factory=dict)  # key -> "default", "env" or "file"

    @classmethod
    def resolve(cls, env: Mapping[str, str], from_file: Mapping[str, int]) -> LaptopTuning:
        values: dict[str, int] = {}
        origins: dict[str, str] = {}
        for key, (default, *_rest) in TUNING_FIELDS.items():
            variable = env_variable(key)
            raw = env.get(variable, "").strip()
            if raw:
                number = parse_whole(raw)
                if number is None:
                    raise ConfigError(f"{variable} must be a whole number")
                values[key], origins[key] = _in_range(key, number, variable), "env"
            elif key in from_file:
                values[key], origins[key] = from_file[key], "file"
            else:
                values[key], origins[key] = default, "default"
        return cls(**values, origins=origins)

    @property
    def debounce_seconds(self) -> float:
        return self.watch_debounce_ms / 1000

    def lines(self) -> list[str]:
        """One line per setting, `key  value  (origin)`, for `memory-proxy show`."""
        return [
            f"{key.ljust(24)} {str(getattr(self, key)).ljust(9)} ({self.origins.get(key, 'default')}; {unit})"
            for key, (_d, _l, _h, unit) in TUNING_FIELDS.items()
        ]


def _in_range(key: str, value: int, name: str) -> int:
    _default, low, high, _unit = TUNING_FIELDS[key]
    if not low <= value <= high:
        raise ConfigError(f"{name} must be from {low} to {high}, not {value}")
    return value
