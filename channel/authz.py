"""Who may use the channel, and what the inner app is told about them.

The channel does not read `callers.toml` (the server does): it asks a `CallerDirectory` for the caller that owns
a Noise static key, on every handshake, every request and between the frames of a long response, so a removed
key stops working at once. `CallerTable` is the immutable lookup a directory builds on each (re)load.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

from channel.errors import ChannelError
from channel.keys import PublicKey

Access = Literal["r", "rw"]
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def valid_name(name: str) -> bool:
    """Caller and index names: lowercase letters, digits, `_.-`, at most 64, never `.`/`..`-like paths."""
    return bool(NAME_PATTERN.fullmatch(name)) and ".." not in name


@dataclass(frozen=True)
class Caller:
    """One entry of callers.toml: a name, its device keys, and the indexes it may read (`r`) or write (`rw`)."""

    name: str
    keys: tuple[PublicKey, ...]
    grants: Mapping[str, Access]

    def __post_init__(self) -> None:
        if not valid_name(self.name):
            raise ChannelError(f"invalid caller name {self.name!r}")
        for index, access in self.grants.items():
            if not valid_name(index) or access not in ("r", "rw"):
                raise ChannelError(f"invalid grant {index!r}={access!r} for caller {self.name}")
        object.__setattr__(self, "grants", MappingProxyType(dict(self.grants)))


@dataclass(frozen=True)
class Identity:
    """A caller as seen through one of its keys."""

    caller: Caller
    key: PublicKey

    @property
    def name(self) -> str:
        return self.caller.name

    @property
    def fingerprint(self) -> str:
        return self.key.fingerprint


class CallerDirectory(Protocol):
    """Anything that answers "whose key is this?" with the current authorization, on every call."""

    def lookup(self, static_key: bytes) -> Identity | None:
        """The identity whose key has this X25519 form, or None if unknown or revoked."""


class CallerTable:
    """An immutable index of callers by the X25519 form of their keys; also a `CallerDirectory`."""

    def __init__(self, callers: Iterable[Caller] = ()) -> None:
        by_static: dict[bytes, Identity] = {}
        names: set[str] = set()
        for caller in callers:
            if caller.name in names:
                raise ChannelError(f"caller {caller.name} is listed twice")
            names.add(caller.name)
            for key in caller.keys:
                if key.x25519 in by_static:
                    owner = by_static[key.x25519].name
                    where = "twice" if owner == caller.name else f"for both {owner} and {caller.name}"
                    raise ChannelError(f"key {key.fingerprint} is listed {where}")
                by_static[key.x25519] = Identity(caller, key)
        self._by_static = by_static
        self.names = frozenset(names)

    def lookup(self, static_key: bytes) -> Identity | None:
        """The identity whose key has this X25519 form, or None."""
        return self._by_static.get(static_key)


@dataclass(frozen=True)
class ChannelUser:
    """What the inner app finds at `scope["user"]` (Starlette's `request.user`)."""

    name: str
    fingerprint: str
    grants: Mapping[str, Access]
    index: str | None = None  # from the x-memory-index header, already checked against the grants
    access: Access | None = None
    is_authenticated: bool = field(default=True, init=False)

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        return self.fingerprint


@dataclass(frozen=True)
class ChannelAuth:
    """What the inner app finds at `scope["auth"]` (Starlette's `request.auth`)."""

    scopes: tuple[str, ...] = ("authenticated",)
