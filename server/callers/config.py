"""Who may connect, on disk: `callers.toml` in the keys directory, its edits, and a directory that reloads it.

The format, as `memory-server callers ...` writes it (hand edits are fine)::

    # Managed by `memory-server callers`; hand edits are fine, the server reloads this file when it changes.
    [callers.alice-laptop]
    keys = [
      "memory-ed25519 <base64> alice@laptop",
    ]
    revoked_keys = []
    grants = { alice = "rw", team = "r" }

- Caller and index names follow `channel.authz.valid_name`. A name with a dot must be quoted in TOML
  (`[callers."alice.laptop"]`), or TOML reads it as a nested table.
- `keys`: public key lines that may connect as this caller. `revoked_keys`: keys that must never work again,
  kept so that a revoke stays auditable. A key appears at most once in the whole file, active or revoked.
- `grants`: index name = "r" (read) or "rw" (read and write). Every field is optional and defaults to empty;
  any other field is an error. The file is UTF-8 and at most `MAX_FILE_BYTES`.
- It holds no secrets but decides who gets in: the CLI writes it with mode 0644 (the server may run as another
  user), and both the file and the keys directory are refused when group or others may write them.
- The CLI renders the whole file again on every change (callers and grants sorted by name, keys in the order
  added), so comments added by hand are not kept.
"""

from __future__ import annotations

import itertools
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from channel.authz import Access, Caller, CallerTable, valid_name
from channel.errors import KeyFileError
from channel.keys import PublicKey
from server.errors import MemoryServerError

CALLERS_FILE = "callers.toml"
MAX_FILE_BYTES = 1 << 20
FILE_MODE = 0o644
HEADER = (
    "# Managed by `memory-server callers`; hand edits are fine, the server reloads this file when it changes.\n"
    "# keys: public key lines that may connect. revoked_keys: keys that must never work again (kept so a revoke\n"
    '# is auditable). grants: index = "r" (read) or "rw" (read and write). Other comments are not kept.\n'
)
CALLER_FIELDS = ("keys", "revoked_keys", "grants")
NAME_RULE = "lowercase letters, digits, '_', '.', '-', at most 64, starting with a letter or digit, no '..'"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class CallersFileError(MemoryServerError):
    """`callers.toml`, the keys directory, or an edit of them is invalid or unsafe. The message says how to fix it."""


def check_name(name: str, what: str) -> str:
    if not valid_name(name):
        raise CallersFileError(f"invalid {what} name {name!r}: use {NAME_RULE}")
    return name


def parse_access(index: str, access: object) -> Access:
    if access not in ("r", "rw"):
        raise CallersFileError(f'grant on {index!r} must be "r" or "rw", not {access!r}')
    return access


@dataclass(frozen=True)
class CallerEntry:
    """One `[callers.NAME]` table."""

    name: str
    keys: tuple[PublicKey, ...] = ()
    revoked_keys: tuple[PublicKey, ...] = ()
    grants: Mapping[str, Access] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name, "caller")
        for key in (*self.keys, *self.revoked_keys):
            _check_comment(key)
        for index, access in self.grants.items():
            check_name(index, "index")
            parse_access(index, access)
        object.__setattr__(self, "grants", MappingProxyType(dict(sorted(self.grants.items()))))


@dataclass(frozen=True)
class CallersConfig:
    """Every caller, sorted by name; validated so that each key appears once in the whole file."""

    callers: tuple[CallerEntry, ...] = ()

    def __post_init__(self) -> None:
        entries = tuple(sorted(self.callers, key=lambda entry: entry.name))
        seen: dict[bytes, str] = {}
        for before, entry in itertools.pairwise(entries):
            if before.name == entry.name:
                raise CallersFileError(f"caller {entry.name!r} is listed twice")
        for entry in entries:
            for key in entry.keys:
                _claim(seen, key, f"a key of caller {entry.name!r}")
            for key in entry.revoked_keys:
                _claim(seen, key, f"a revoked key of caller {entry.name!r}")
        object.__setattr__(self, "callers", entries)

    def get(self, name: str) -> CallerEntry | None:
        return next((entry for entry in self.callers if entry.name == name), None)

    def table(self) -> CallerTable:
        """The immutable lookup the channel asks; revoked keys are simply absent."""
        return CallerTable(Caller(entry.name, entry.keys, entry.grants) for entry in self.callers)

    # edits: each returns a new, validated config ---------------------------------------------------------

    def add(self, name: str, keys: Iterable[PublicKey], grants: Mapping[str, Access]) -> CallersConfig:
        """Create the caller or extend it: new keys are appended, each grant sets that index's access."""
        entry = self.get(check_name(name, "caller")) or CallerEntry(name)
        revoked = {key.raw: owner.name for owner in self.callers for key in owner.revoked_keys}
        added = list(entry.keys)
        for key in keys:
            if key.raw in revoked:
                raise CallersFileError(
                    f"key {key.fingerprint} was revoked from caller {revoked[key.raw]!r} and must never work again; "
                    "make a new key on that device (memory-proxy init --force)"
                )
            if key not in added:
                added.append(key)
        return self._with(replace(entry, keys=tuple(added), grants={**entry.grants, **grants}))

    def revoke(self, name: str, key: str | None = None) -> CallersConfig:
        """Move every active key of the caller, or the one given as a line or fingerprint, to `revoked_keys`."""
        entry = self._existing(name)
        if key is None:
            gone = entry.keys
        else:
            wanted = _fingerprint_of(key)
            gone = tuple(candidate for candidate in entry.keys if candidate.fingerprint == wanted)
            if not gone:
                held = ", ".join(k.fingerprint for k in entry.keys) or "none"
                was = " (it is already revoked)" if any(k.fingerprint == wanted for k in entry.revoked_keys) else ""
                raise CallersFileError(f"caller {name!r} has no active key {wanted}{was}; its active keys: {held}")
        kept = tuple(k for k in entry.keys if k not in gone)
        return self._with(replace(entry, keys=kept, revoked_keys=entry.revoked_keys + gone))

    def grant(self, name: str, grants: Mapping[str, Access], remove: Iterable[str] = ()) -> CallersConfig:
        """Set the access of each index given, and drop the grants on the indexes in `remove`."""
        entry = self._existing(name)
        updated = {**entry.grants, **grants}
        for index in remove:
            if index not in updated:
                raise CallersFileError(f"caller {name!r} has no grant on {index!r} to remove")
            del updated[index]
        return self._with(replace(entry, grants=updated))

    def _existing(self, name: str) -> CallerEntry:
        entry = self.get(name)
        if entry is None:
            known = ", ".join(e.name for e in self.callers) or "none yet"
            raise CallersFileError(f"no caller named {name!r} (callers: {known})")
        return entry

    def _with(self, entry: CallerEntry) -> CallersConfig:
        return CallersConfig((*(e for e in self.callers if e.name != entry.name), entry))


def _check_comment(key: PublicKey) -> None:
    """The list is stored as UTF-8 text (the file or the database's row): a comment that is not (a lone surrogate,
    how Python passes on a non-UTF-8 command-line argument) is refused here, for both."""
    try:
        key.comment.encode("utf-8")
    except UnicodeEncodeError:
        raise CallersFileError(f"the comment of key {key.fingerprint} is not valid UTF-8 text") from None


def _claim(seen: dict[bytes, str], key: PublicKey, where: str) -> None:
    if key.raw in seen:
        raise CallersFileError(
            f"key {key.fingerprint} is listed twice: as {seen[key.raw]} and as {where}; a key belongs to one caller, "
            "and a revoked key is never active again"
        )
    seen[key.raw] = where


def _fingerprint_of(reference: str) -> str:
    """The fingerprint a public key line or a fingerprint names. The reference is never echoed: it may be secret."""
    if reference.strip().startswith("SHA256:"):
        return reference.strip()
    try:
        return PublicKey.parse(reference).fingerprint
    except KeyFileError as exc:
        raise CallersFileError(f"name a key by its public key line or its SHA256:... fingerprint ({exc})") from None


# parse and render -----------------------------------------------------------------------------------------


def parse_callers(text: str) -> CallersConfig:
    """Validate the whole document; every message names the caller and field at fault."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CallersFileError(f"not valid TOML: {exc}") from None
    unknown = sorted(set(document) - {"callers"})
    if unknown:
        raise CallersFileError(f"unknown top-level field {unknown[0]!r}: only [callers.NAME] tables belong here")
    tables = document.get("callers", {})
    if not isinstance(tables, dict):
        raise CallersFileError("`callers` must be a table of [callers.NAME] tables")
    return CallersConfig(tuple(_parse_entry(name, body) for name, body in tables.items()))


def _parse_entry(name: str, body: object) -> CallerEntry:
    where = f"caller {name!r}"
    if not isinstance(body, dict):
        raise CallersFileError(f"{where} must be a table ([callers.{name}])")
    for unknown in sorted(set(body) - set(CALLER_FIELDS)):
        hint = f' (quote a name with a dot: [callers."{name}.{unknown}"])' if isinstance(body[unknown], dict) else ""
        raise CallersFileError(f"{where}: unknown field {unknown!r}; fields are {', '.join(CALLER_FIELDS)}{hint}")
    grants = body.get("grants", {})
    if not isinstance(grants, dict):
        raise CallersFileError(f'{where}: grants must be a table like {{ index = "rw" }}')
    try:
        return CallerEntry(
            check_name(name, "caller"),
            _parse_keys(body.get("keys", []), "keys"),
            _parse_keys(body.get("revoked_keys", []), "revoked_keys"),
            {check_name(index, "index"): parse_access(index, access) for index, access in grants.items()},
        )
    except CallersFileError as exc:
        raise CallersFileError(f"{where}: {exc}") from None


def _parse_keys(lines: Any, what: str) -> tuple[PublicKey, ...]:
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise CallersFileError(f"{what} must be a list of public key lines")
    keys: list[PublicKey] = []
    for number, line in enumerate(lines, start=1):
        try:
            key = PublicKey.parse(line)
        except KeyFileError as exc:
            raise CallersFileError(f"{what}[{number}]: {exc}") from None
        if key in keys:
            raise CallersFileError(f"{what}[{number}]: key {key.fingerprint} is listed twice")
        keys.append(key)
    return tuple(keys)


def render_callers(config: CallersConfig) -> str:
    """The canonical text: same config, same bytes; `parse_callers` reads it back to an equal config."""
    parts = [HEADER]
    for entry in config.callers:
        grants = ", ".join(f"{_toml_key(index)} = {_toml_string(access)}" for index, access in entry.grants.items())
        parts.append(
            f"\n[callers.{_toml_key(entry.name)}]\n"
            f"keys = {_toml_keys(entry.keys)}\n"
            f"revoked_keys = {_toml_keys(entry.revoked_keys)}\n"
            f"grants = {'{ ' + grants + ' }' if grants else '{}'}\n"
        )
    return "".join(parts)


def _toml_keys(keys: tuple[PublicKey, ...]) -> str:
    if not keys:
        return "[]"
    return "[\n" + "".join(f"  {_toml_string(key.line())},\n" for key in keys) + "]"


def _toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _toml_string(name)


def _toml_string(text: str) -> str:
    # A JSON string is a TOML basic string, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")
