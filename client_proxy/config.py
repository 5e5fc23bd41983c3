"""This device's proxy configuration: where it lives, what `proxy.toml` holds, and loading it safely.

The config directory (`proxy_home`) is created with mode 0700 and holds:

- `device.key`: this device's private key (mode 0600, never a symlink; see `channel.keys`);
- `proxy.toml`, written by `memory-proxy init` (mode 0600)::

      server_url = "https://memory.example.com"
      server_key = "memory-ed25519 <base64> memory-server"
      device_name = "alice-laptop"
      index = "notes"                 # optional
      sync = false                    # optional: no file sync (forwarding only)
      sync_exclude = ["memory/private/**"]   # optional: paths never synced (fnmatch on the relative path)
      transcripts = true              # optional: upload Claude Code session transcripts (off by default)
      watch_debounce_ms = 200         # optional timings (`client_proxy.tuning`), each also MEMORY_PROXY_<KEY>
      transcripts_delta_bytes = 65536
      transcripts_delta_lines = 40

  `server_key` is pinned: a server presenting any other key is refused. `device_name` is the caller name
  suggested to the operator and the comment of the device key. `index` is the index the forwarder works on
  when neither `--index` nor `MEMORY_INDEX` names one. `sync` and `sync_exclude` steer the file sync
  (`client_proxy.sync.syncer`), `transcripts` the session upload (`client_proxy.transcripts.upload`); `init` keeps them.
  No other fields are allowed.
- `handshake-stamp`: the newest handshake timestamp the server accepted from this device (mode 0600), so that a
  clock set back does not lock the device out (`channel.client_stamps`).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from channel.authz import valid_name
from channel.errors import KeyFileError
from channel.files import atomic_write
from channel.keys import PublicKey, read_private_key
from client_proxy.errors import ConfigError
from client_proxy.sync.scope import pattern_problem
from client_proxy.tuning import TUNING_FIELDS, file_values

CONFIG_FILE = "proxy.toml"
DEVICE_KEY_FILE = "device.key"
FIELDS = ("server_url", "server_key", "device_name")
OPTIONAL_FIELDS = ("index",)
SYNC_FIELDS = ("sync", "sync_exclude", "transcripts")
MAX_EXCLUDE_PATTERNS = 100
MAX_CONFIG_BYTES = 64 * 1024
HEADER = "# Written by `memory-proxy init`; run it again to change the server or re-pin its key.\n"


def proxy_home(env: Mapping[str, str]) -> Path:
    """`$MEMORY_PROXY_HOME`, else `$XDG_CONFIG_HOME/memory-proxy`, else `~/.config/memory-proxy`. A leading `~`
    is expanded: `.mcp.json` files often carry one, and no shell expands it there."""
    if env.get("MEMORY_PROXY_HOME"):
        return Path(env["MEMORY_PROXY_HOME"]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser() / "memory-proxy"
    return Path(env.get("HOME") or Path.home()) / ".config" / "memory-proxy"


def validate_server_url(url: str) -> str:
    """An http(s) base URL without credentials, query or fragment; returned without a trailing slash.

    A refusal never shows the URL: its query or user part may hold a token or a password pasted by mistake."""
    if not url or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ConfigError("server URL must be one URL without spaces or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed or invalid [IPv6] host; the error's text would show the URL
        raise ConfigError(
            "server URL has an invalid host (an IPv6 address goes in brackets: https://[::1]:8443)"
        ) from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError("server URL must start with https:// (or http://)")
    if "@" in parts.netloc:
        raise ConfigError("server URL must not hold a user or password: this device proves itself with its key")
    if "?" in url or "#" in url:
        raise ConfigError("server URL must not have a query (?) or fragment (#)")
    try:
        port = parts.port  # raises on a malformed port
    except ValueError:
        port = 0
    if port == 0:
        raise ConfigError("server URL has an invalid port (a number from 1 to 65535 after the host's ':')")
    if not parts.hostname:
        raise ConfigError("server URL has no host, e.g. https://memory.example.com")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def parse_server_key(line: str) -> PublicKey:
    try:
        return PublicKey.parse(line)
    except KeyFileError as exc:
        raise ConfigError(f"server key: {exc}; copy the line `memory-server keys show` prints") from None


def check_device_name(name: str) -> str:
    return _check_name("device name", name, "alice-laptop")


def default_device_name(user: str, host: str) -> str:
    """`user-host` squeezed into a valid caller name, so the operator can paste the suggested command."""
    text = re.sub(r"[^a-z0-9_.-]+", "-", f"{user}-{host.split('.')[0]}".lower())
    text = re.sub(r"\.{2,}", ".", text).strip("-._")[:64].rstrip("-._")
    return text if valid_name(text) else "device"


def check_index_name(name: str) -> str:
    return _check_name("index name", name, "notes")


def _check_name(what: str, name: str, example: str) -> str:
    """`name` if it is a valid caller or index name. The refusal does not repeat the name: a value that does not
    fit is as likely a secret pasted into the wrong setting (a key line, a token) as a typo."""
    if not valid_name(name):
        raise ConfigError(
            f"invalid {what}: use lowercase letters, digits, '_', '.', '-' (at most 64, starting with a letter "
            f"or digit, no '..'), e.g. {example}"
        )
    return name


def render_config(
    server_url: str,
    server_key: PublicKey,
    device_name: str,
    index: str | None = None,
    *,
    sync: bool | None = None,
    sync_exclude: tuple[str, ...] = (),
    transcripts: bool | None = None,
    tuning: Mapping[str, int] | None = None,
) -> str:
    values: dict[str, object] = {"server_url": server_url, "server_key": server_key.line(), "device_name": device_name}
    if index is not None:
        values["index"] = index
    if sync is not None:
        values["sync"] = sync
    if sync_exclude:
        values["sync_exclude"] = list(sync_exclude)
    if transcripts is not None:
        values["transcripts"] = transcripts
    values.update(tuning or {})
    # A JSON string (or list of strings, or boolean) is valid TOML, except that TOML also wants DEL escaped.
    lines = [
        f"{name} = {json.dumps(value, ensure_ascii=False)}".replace("\x7f", "\\u007f") for name, value in values.items()
    ]
    return HEADER + "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ProxyConfig:
    """A loaded, validated `proxy.toml` plus the public half of the device key (the key file was checked)."""

    home: Path
    server_url: str
    server_key: PublicKey
    device_name: str
    device_public: PublicKey
    index: str | None = None
    sync: bool | None = None
    sync_exclude: tuple[str, ...] = ()
    transcripts: bool | None = None
    tuning: Mapping[str, int] = field(default_factory=dict)  # the timings proxy.toml sets (client_proxy.tuning)

    @property
    def device_key_path(self) -> Path:
        return self.home / DEVICE_KEY_FILE

    @classmethod
    def load(cls, home: Path) -> ProxyConfig:
        """Read and check everything; raise `ConfigError` or `KeyFileError` with the file and the fix."""
        path = home / CONFIG_FILE
        check_home(home)
        try:
            # O_NONBLOCK: a FIFO named like the config must not hang the proxy; _check_file refuses it at once.
            with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
                _check_file(path, os.fstat(handle.fileno()))
                data = handle.read(MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            raise ConfigError(
                f"no {CONFIG_FILE} in {home}: run `memory-proxy init --server URL --server-key LINE` first"
            ) from None
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
        try:
            document = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}; fix it or run `memory-proxy init` again") from None
        except RecursionError:  # arrays or tables nested past the reader's stack
            raise ConfigError(f"{path} is nested too deeply to read; fix it or run `memory-proxy init` again") from None
        values = _fields(document, path)
        sync, sync_exclude = _sync_fields(document, path)
        transcripts = document.get("transcripts")
        if transcripts is not None and not isinstance(transcripts, bool):
            raise ConfigError(f"{path}: transcripts must be true or false")
        tuning = file_values(document, path)  # its errors name the file already
        try:
            return cls(
                home=home,
                server_url=validate_server_url(values["server_url"]),
                server_key=parse_server_key(values["server_key"]),
                device_name=check_device_name(values["device_name"]),
                device_public=read_private_key(home / DEVICE_KEY_FILE).public,
                index=check_index_name(values["index"]) if "index" in values else None,
                sync=sync,
                sync_exclude=sync_exclude,
                transcripts=transcripts,
                tuning=tuning,
            )
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None


def _fields(document: Mapping[str, object], path: Path) -> dict[str, str]:
    unknown = sorted(set(document) - set(FIELDS) - set(OPTIONAL_FIELDS) - set(SYNC_FIELDS) - set(TUNING_FIELDS))
    if unknown:
        known = ", ".join((*FIELDS, *OPTIONAL_FIELDS, *SYNC_FIELDS, *TUNING_FIELDS))
        raise ConfigError(f"{path}: unknown field {unknown[0]!r}; the fields are {known}")
    values: dict[str, str] = {}
    for name in FIELDS + OPTIONAL_FIELDS:
        value = document.get(name)
        if name in OPTIONAL_FIELDS and name not in document:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {name} must be a string" + ("" if name in document else ", and is missing"))
        values[name] = value
    return values


def _sync_fields(document: Mapping[str, object], path: Path) -> tuple[bool | None, tuple[str, ...]]:
    sync = document.get("sync")
    if sync is not None and not isinstance(sync, bool):
        raise ConfigError(f"{path}: sync must be true or false")
    patterns = document.get("sync_exclude", [])
    if not isinstance(patterns, list) or not all(isinstance(pattern, str) for pattern in patterns):
        raise ConfigError(f'{path}: sync_exclude must be a list of strings, e.g. ["memory/private/**"]')
    if len(patterns) > MAX_EXCLUDE_PATTERNS:
        raise ConfigError(f"{path}: sync_exclude may hold at most {MAX_EXCLUDE_PATTERNS} patterns")
    for number, pattern in enumerate(patterns, 1):
        problem = pattern_problem(pattern)
        if problem:  # named by position, not shown: a secret pasted there must not be printed back
            raise ConfigError(f"{path}: sync_exclude pattern {number}: {problem}")
    return sync, tuple(patterns)


def _check_file(path: Path, info: os.stat_result) -> None:
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"refusing {path}: not a regular file")
    if mode & 0o022:
        raise ConfigError(f"refusing {path}: mode {mode:04o} lets others change the pinned key; run: chmod 600 {path}")


def check_home(home: Path) -> None:
    """Refuse a config directory that group or others may write: they could swap the pinned key."""
    try:
        info = os.stat(home)
    except FileNotFoundError:
        raise ConfigError(f"no proxy config directory {home}: run `memory-proxy init` first") from None
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{home} is not a directory")
    if mode & 0o022:
        raise ConfigError(f"refusing {home}: mode {mode:04o} lets group or others change it; run: chmod 700 {home}")


def prepare_home(home: Path) -> None:
    """Create the config directory with mode 0700 when missing; refuse one that others may write."""
    if not home.exists():
        home.mkdir(mode=0o700, parents=True)
        os.chmod(home, 0o700)  # mkdir's mode is masked by the umask
    check_home(home)


def write_config(home: Path, text: str) -> None:
    """Replace `proxy.toml` atomically (temp file, fsync, rename) with mode 0600."""
    atomic_write(home / CONFIG_FILE, text.encode("utf-8"), 0o600)
