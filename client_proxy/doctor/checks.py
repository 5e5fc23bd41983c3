"""`memory-proxy doctor`'s checks that need no server: configuration, key file, sync watcher, Claude Code.

Each check is a small function returning a `Result`: whether it passed, the line to show, and when it failed the
fix to run. A check that cannot run because an earlier one failed returns `skipped`; one that found something
worth knowing that is not a fault (no proxy watching while Claude Code is closed) returns a warning.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from channel.errors import ChannelError, KeyFileError
from channel.keys import read_private_key
from client_proxy.claude import settings_edit
from client_proxy.claude.install import LOCAL_SETTINGS_FILE, MAX_SETTINGS_BYTES, MCP_FILE, SETTINGS_FILE, read_json
from client_proxy.config import CONFIG_FILE, DEVICE_KEY_FILE, ProxyConfig
from client_proxy.errors import ConfigError, ProxyError
from client_proxy.settings import RunSettings
from client_proxy.sync.state import StateStore
from client_proxy.transcripts.files import claude_home

# ~/.claude.json is Claude Code's own state, with every project's history in it: it grows well past a settings file.
MAX_CLAUDE_STATE_BYTES = 256 * 1024 * 1024


class Result(NamedTuple):
    ok: bool | None  # None: not checked, an earlier check failed
    line: str
    fix: str = ""
    warning: bool = False  # passed, but with a hint (`fix`) worth showing


def warning(line: str, hint: str) -> Result:
    return Result(True, line, hint, warning=True)


def skipped(what: str, why: str) -> Result:
    return Result(None, f"{what}: not checked ({why})")


def check_config(home: Path) -> tuple[Result, ProxyConfig | None]:
    """`proxy.toml` reads and validates (the device key has its own check)."""
    try:
        config = ProxyConfig.load(home)
    except KeyFileError:  # the toml was fine: ProxyConfig reads the key last
        return Result(True, f"config: {home / CONFIG_FILE} reads"), None
    except ConfigError as exc:
        return Result(False, f"config: {exc}", "memory-proxy init --server URL --server-key LINE"), None
    index = f", index {config.index}" if config.index else ""
    return Result(True, f"config: {home / CONFIG_FILE} (server {config.server_url}{index})"), config


def check_key_file(home: Path) -> Result:
    """The device key is a private (0600), sound key file."""
    path = home / DEVICE_KEY_FILE
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Result(False, f"device key: none at {path}", "memory-proxy init --server URL --server-key LINE")
    except OSError as exc:
        return Result(False, f"device key: cannot look at {path}: {exc.strerror}", f"ls -l {path}")
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISREG(info.st_mode) and mode & 0o077:
        return Result(False, f"device key: {path} has mode {mode:04o}: other users can read it", f"chmod 600 {path}")
    try:
        key = read_private_key(path)
    except ChannelError as exc:
        return Result(False, f"device key: {exc}", "memory-proxy init --force ... (a new key: the operator adds it)")
    return Result(True, f"device key: {path} (mode {mode:04o}, {key.public.fingerprint})")


def check_watcher(settings: RunSettings, config: ProxyConfig, index: str) -> Result:
    """A running `memory-proxy` syncs this project folder (or sync is off for it, which is fine)."""
    choice = settings.sync_choice(config)
    root = settings.sync_root
    if not choice.enabled:
        return Result(True, f"file sync: {choice.reason}")
    if StateStore(settings.state_home, config.server_url, index, root).claimed():
        return Result(True, f"file sync: a memory-proxy is watching {root}")
    # Claude Code starts the proxy: when it is closed nobody watches, and nothing is wrong.
    return warning(
        f"file sync: no memory-proxy is watching {root} now (files sync while Claude Code runs in the project)",
        "start Claude Code in the project (it launches memory-proxy), or run: memory-proxy run --project "
        f"{root} </dev/null",
    )


def check_claude(project: Path, env: Mapping[str, str]) -> Result:
    """Claude Code knows the MCP server (any scope) and the project has the SessionStart hook (any settings file)."""
    servers = _server_places(project, env)
    hooks = [
        str(path)
        for path in (project / SETTINGS_FILE, project / LOCAL_SETTINGS_FILE, claude_home(env) / "settings.json")
        if "SessionStart" in settings_edit.installed_hooks(_json_or_empty(path))
    ]
    missing = ([] if servers else ["no MCP server runs memory-proxy"]) + ([] if hooks else ["no SessionStart hook"])
    if missing:
        return Result(
            False,
            f"Claude Code: {' and '.join(missing)} for {project}",
            f"memory-proxy install-claude --project {project}",
        )
    return Result(True, f"Claude Code: MCP server in {servers[0]}, hooks in {hooks[0]}")


def _server_places(project: Path, env: Mapping[str, str]) -> list[str]:
    """Where our MCP server is registered for `project`: `.mcp.json`, or `~/.claude.json` (user or local scope)."""
    places = []
    if settings_edit.registered_server(_json_or_empty(project / MCP_FILE)):
        places.append(str(project / MCP_FILE))
    home = Path(env.get("HOME") or Path.home())
    for path in dict.fromkeys([claude_home(env) / ".claude.json", home / ".claude.json"]):
        document = _json_or_empty(path, MAX_CLAUDE_STATE_BYTES)
        by_project = document.get("projects", {})
        local = by_project.get(str(project.absolute())) if isinstance(by_project, dict) else None
        if settings_edit.registered_server(document) or settings_edit.registered_server(local):
            places.append(str(path))
    return places


def _json_or_empty(path: Path, max_bytes: int = MAX_SETTINGS_BYTES) -> dict[str, object]:
    try:
        return read_json(path, max_bytes) or {}
    except ProxyError:
        return {}
