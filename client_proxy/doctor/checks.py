"""`memory-proxy doctor`'s checks that need no server: configuration, key file, sync watcher, Claude Code.

Each check is a small function returning a `Result`: whether it passed, the line to show, and when it failed the
fix to run. A check that cannot run because an earlier one failed returns `skipped`; one that found something
worth knowing that is not a fault (no proxy watching while Claude Code is closed) returns a warning.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from channel.errors import ChannelError, KeyFileError
from channel.keys import read_private_key
from client_proxy.claude import settings_edit
from client_proxy.claude.install import LOCAL_SETTINGS_FILE, MAX_SETTINGS_BYTES, MCP_FILE, SETTINGS_FILE, read_json
from client_proxy.claude.settings_edit import Json
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
        "start Claude Code in the project (it launches memory-proxy), or keep one syncing in a terminal (it stops"
        f" when its stdin closes): tail -f /dev/null | memory-proxy run --project {shlex.quote(str(root))}",
    )


class ClaudeFiles(NamedTuple):
    """What Claude Code's files say about `memory-proxy` for a project, read once for every check that needs it."""

    servers: list[tuple[str, Json]]  # where our MCP server is registered, and its entry: Claude Code's order
    hooks: list[str]  # the settings files with our SessionStart hook
    faults: list[tuple[Path, str]]  # files that cannot be read as JSON objects (Claude Code cannot either), and why


def read_claude(project: Path, env: Mapping[str, str]) -> ClaudeFiles:
    """Our MCP server in every scope, local before project (`.mcp.json`) before user, as Claude Code lets one
    shadow the next; our hooks in every settings file; and each of those files that does not read."""
    faults: list[tuple[Path, str]] = []

    def read(path: Path, max_bytes: int = MAX_SETTINGS_BYTES) -> Json:
        try:
            return read_json(path, max_bytes) or {}
        except ProxyError as exc:
            faults.append((path, _own_words(str(exc))))
            return {}

    home = Path(env.get("HOME") or Path.home())
    local, user = [], []
    for path in dict.fromkeys([claude_home(env) / ".claude.json", home / ".claude.json"]):
        document = read(path, MAX_CLAUDE_STATE_BYTES)
        by_project = document.get("projects", {})
        scope = by_project.get(str(project.absolute())) if isinstance(by_project, dict) else None
        if entry := settings_edit.registered_server(scope):
            local.append((f"{path} (local scope)", entry))
        if entry := settings_edit.registered_server(document):
            user.append((f"{path} (user scope)", entry))
    shared = settings_edit.registered_server(read(project / MCP_FILE))
    servers = [*local, *([(str(project / MCP_FILE), shared)] if shared else []), *user]
    hooks = [
        str(path)
        for path in (project / SETTINGS_FILE, project / LOCAL_SETTINGS_FILE, claude_home(env) / "settings.json")
        if "SessionStart" in settings_edit.installed_hooks(read(path))
    ]
    return ClaudeFiles(servers, hooks, faults)


def check_claude(project: Path, env: Mapping[str, str], files: ClaudeFiles | None = None) -> Result:
    """Claude Code knows the MCP server (any scope) and the project has the SessionStart hook (any settings file);
    a settings file that does not read is named with its own error, as is one `install-claude` would refuse."""
    files = files if files is not None else read_claude(project, env)
    install_fix = f"memory-proxy install-claude --project {project}"
    missing = ([] if files.servers else ["no MCP server runs memory-proxy"]) + (
        [] if files.hooks else ["no SessionStart hook"]
    )
    if files.faults:
        paths = " and ".join(dict.fromkeys(str(path) for path, _ in files.faults))
        faults = "; ".join(fault for _, fault in files.faults)
        if missing:
            line = f"Claude Code: {faults}; {' and '.join(missing)} for {project}"
            return Result(False, line, f"correct {paths}, then run: {install_fix}")
        return warning(f"Claude Code: MCP server and hooks found, but {faults}", f"correct {paths}")
    if missing:
        refusal = _install_refusal(project)
        if refusal is not None:
            path, why = refusal
            line = f"Claude Code: {' and '.join(missing)} for {project}, and install-claude would refuse {path}: {why}"
            return Result(False, line, f"correct {path}, then run: {install_fix}")
        return Result(False, f"Claude Code: {' and '.join(missing)} for {project}", install_fix)
    return Result(True, f"Claude Code: MCP server in {files.servers[0][0]}, hooks in {files.hooks[0]}")


def _install_refusal(project: Path) -> tuple[Path, str] | None:
    """The file `install-claude` would refuse to edit (an unexpected shape, a server named like ours that is another
    program), and why; None when it would edit both. The same pure edits it makes, on what the files hold now."""
    edits: list[tuple[Path, Callable[[Json], Json]]] = [
        (project / SETTINGS_FILE, settings_edit.add_hooks),
        (project / MCP_FILE, lambda document: settings_edit.add_server(document, None)),
    ]
    for path, edit in edits:
        try:
            edit(read_json(path) or {})
        except ProxyError as exc:  # SettingsFormatError; or the file changed since `read_claude` and does not read
            return path, _own_words(str(exc))
    return None


def _own_words(message: str) -> str:
    """An install-claude refusal without what only install-claude says ("nothing was changed", "run this again")."""
    for tail in ("; nothing was changed", ": fix or move it, then run this again", ", then run this again"):
        message = message.removesuffix(tail)
    return message
