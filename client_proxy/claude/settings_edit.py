"""Claude Code's settings, edited as data: our hooks into `.claude/settings.json`, our server into `.mcp.json`.

Pure: a parsed JSON document in, a new one out; the input is never changed. Everything not ours is kept as it was,
in its order. What is ours is recognised by its command, only when it is exactly one of our own forms: a hook
`memory-proxy hook EVENT` as `HOOKS` writes it, or `memory-proxy context [--project DIR]`, the hand set-up the
README used to describe (any path to the program). A command with anything more (`&&`, `;`, a pipe, a redirection,
another word, a `$(...)`) is the user's, kept as it is. So adding twice changes nothing and removing leaves the
user's settings as they were before the first add (a container our removal empties is dropped; one that was empty
is kept).

Claude Code's documented formats (https://code.claude.com/docs/en/hooks, https://code.claude.com/docs/en/mcp):
- settings `hooks`: event name -> list of matcher groups `{"matcher": ..., "hooks": [handler, ...]}`, each
  handler `{"type": "command", "command": ..., "timeout": seconds}`; `matcher` may be left out for events that
  do not use one (Stop) or to match every source (SessionStart: startup, resume, clear, compact).
- `.mcp.json` at the project root: `{"mcpServers": {name: {"type": "stdio", "command": ..., "args": [...]}}}`.
"""

from __future__ import annotations

import copy
import posixpath
import shlex
from typing import Any, Final

from client_proxy.errors import ProxyError

PROGRAM: Final = "memory-proxy"
SERVER_NAME: Final = "memory"
HOOK_TIMEOUT: Final = 30  # seconds; the context hook reads local files only, the others less

# One handler per event. The event decides what stdout does: SessionStart's becomes the agent's context; Stop's
# JSON can ask the agent to go on (`decision: block` with a reason); PreCompact's is shown to the user only.
HOOKS: Final[dict[str, dict[str, Any]]] = {
    "SessionStart": {"type": "command", "command": f"{PROGRAM} hook session-start", "timeout": HOOK_TIMEOUT},
    "PreCompact": {"type": "command", "command": f"{PROGRAM} hook pre-compact", "timeout": HOOK_TIMEOUT},
    "Stop": {"type": "command", "command": f"{PROGRAM} hook stop", "timeout": HOOK_TIMEOUT},
}
# The arguments of our hook commands (`hook session-start`, ...): with any path to the program, these are ours.
_OUR_HOOK_ARGUMENTS: Final = frozenset(tuple(shlex.split(handler["command"])[1:]) for handler in HOOKS.values())

Json = dict[str, Any]


class SettingsFormatError(ProxyError):
    """A Claude Code settings file whose shape we cannot edit safely (we change nothing then)."""


def is_ours(command: object) -> bool:
    """Whether a hook command is exactly one of memory-proxy's own (any path to the program); see the module's
    docstring. Anything the shell would run besides it makes the command the user's."""
    if not isinstance(command, str):
        return False
    words = _shell_words(command)
    if not words or posixpath.basename(words[0]) != PROGRAM:
        return False
    arguments = words[1:]
    if tuple(arguments) in _OUR_HOOK_ARGUMENTS:
        return True
    match arguments:
        case ["context"]:
            return True
        case ["context", "--project", project]:
            return _runs_nothing(project)
        case ["context", option] if option.startswith("--project="):
            return _runs_nothing(option.removeprefix("--project="))
    return False


def _shell_words(command: str) -> list[str] | None:
    """The words of `command` as a POSIX shell splits them, each shell operator (`;`, `&&`, `|`, `>`, ...) a word
    of its own and `#` kept as a word; None when it cannot be split (an open quote)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


def _runs_nothing(word: str) -> bool:
    """A `--project` value the shell only expands (`"$CLAUDE_PROJECT_DIR"`), with no command substitution in it."""
    return bool(word) and "`" not in word and "$(" not in word


def add_hooks(settings: Json) -> Json:
    """`settings` with our three hooks, each once; an older hook of ours is replaced, the user's are kept."""
    new = copy.deepcopy(_checked(settings))
    hooks = new.setdefault("hooks", {})
    for event, handler in HOOKS.items():
        groups = hooks.get(event, [])
        if _ours_in(groups) == [handler] and {"hooks": [handler]} in groups:
            continue  # already there, exactly as we would write it
        kept, _ = _without_ours(groups)
        hooks[event] = [*kept, {"hooks": [dict(handler)]}]
    return new


def remove_hooks(settings: Json) -> Json:
    """`settings` without any hook of ours; containers our removal emptied are dropped."""
    new = copy.deepcopy(_checked(settings))
    hooks = new.get("hooks")
    if not isinstance(hooks, dict):
        return new
    for event in list(hooks):
        groups = hooks[event]
        kept, removed = _without_ours(groups)
        if not removed:
            continue
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks and "hooks" in settings and settings["hooks"]:
        del new["hooks"]
    return new


def installed_hooks(settings: Json) -> list[str]:
    """The events that have a hook of ours (for `doctor`); an unexpected shape counts as none."""
    try:
        hooks = _checked(settings).get("hooks", {})
    except SettingsFormatError:
        return []
    return [event for event, groups in hooks.items() if _ours_in(groups)]


def server_entry(index: str | None) -> Json:
    """Our `.mcp.json` entry: `memory-proxy run`, naming the index when one is given."""
    return {"type": "stdio", "command": PROGRAM, "args": ["run", *(["--index", index] if index else [])]}


def add_server(document: Json, index: str | None) -> Json:
    """`.mcp.json` with our server under `SERVER_NAME`, naming `index` (None: keep the index an entry of ours
    names, else none); refused when that name holds another program. An entry of ours keeps everything the user
    gave it (`env`, a full path to the program, other arguments): only its `--index` is ours to change."""
    new = copy.deepcopy(_checked_mcp(document))
    servers = new.setdefault("mcpServers", {})
    current = servers.get(SERVER_NAME)
    if current is not None and not _is_our_server(current):
        raise SettingsFormatError(
            f'.mcp.json already has an MCP server named "{SERVER_NAME}" that is not memory-proxy; '
            "rename or remove it, then run this again"
        )
    if current is None:
        servers[SERVER_NAME] = server_entry(index)
    elif index is not None:
        current["args"] = _with_index(current.get("args") or ["run"], index)
    return new


def _with_index(args: list[Any], index: str) -> list[Any]:
    """`memory-proxy run` arguments naming `index`: any `--index` they held is replaced, in its place, else added."""
    kept: list[Any] = []
    place: int | None = None
    words = iter(args)
    for word in words:
        if word == "--index" or (isinstance(word, str) and word.startswith("--index=")):
            place = len(kept) if place is None else place
            if word == "--index":
                next(words, None)  # its value
        else:
            kept.append(word)
    at = len(kept) if place is None else place
    return [*kept[:at], "--index", index, *kept[at:]]


def remove_server(document: Json) -> Json:
    """`.mcp.json` without our server (another program under the name is left alone)."""
    new = copy.deepcopy(_checked_mcp(document))
    servers = new.get("mcpServers")
    if isinstance(servers, dict) and _is_our_server(servers.get(SERVER_NAME)):
        del servers[SERVER_NAME]
        if not servers:
            del new["mcpServers"]
    return new


def registered_server(document: object) -> Json | None:
    """Our server's entry in an `mcpServers` holder (`.mcp.json`, or a scope of `~/.claude.json`), or None."""
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        return None
    return next((entry for entry in servers.values() if _is_our_server(entry)), None)


def _is_our_server(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    command = entry.get("command")
    args = entry.get("args", [])
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    return posixpath.basename(command) == PROGRAM and (not args or args[0] == "run")


def _ours_in(groups: list[Json]) -> list[Json]:
    return [handler for group in groups for handler in group["hooks"] if is_ours(handler.get("command"))]


def _without_ours(groups: list[Json]) -> tuple[list[Json], int]:
    """The groups with our handlers taken out (a group left with none is dropped), and how many were ours."""
    kept: list[Json] = []
    removed = 0
    for group in groups:
        handlers = [h for h in group["hooks"] if not is_ours(h.get("command"))]
        removed += len(group["hooks"]) - len(handlers)
        if handlers or not group["hooks"]:
            kept.append({**group, "hooks": handlers})
    return kept, removed


def _checked(settings: object) -> Json:
    """The settings if their `hooks` have the documented shape; `SettingsFormatError` naming the first fault."""
    if not isinstance(settings, dict):
        raise SettingsFormatError("the settings file must hold a JSON object")
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsFormatError('"hooks" must be an object of event names')
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise SettingsFormatError(f'"hooks"."{event}" must be a list of matcher groups')
        for number, group in enumerate(groups):
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                raise SettingsFormatError(f'"hooks"."{event}"[{number}] must be an object with a "hooks" list')
            if not all(isinstance(handler, dict) for handler in group["hooks"]):
                raise SettingsFormatError(f'"hooks"."{event}"[{number}].hooks must hold objects')
    return settings


def _checked_mcp(document: object) -> Json:
    if not isinstance(document, dict):
        raise SettingsFormatError(".mcp.json must hold a JSON object")
    if not isinstance(document.get("mcpServers", {}), dict):
        raise SettingsFormatError('"mcpServers" in .mcp.json must be an object')
    return document
