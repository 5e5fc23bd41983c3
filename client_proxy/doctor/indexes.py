"""Which index `memory-proxy doctor` checks the grant (and the sync watcher) of, and where that index was named.

First the index the `memory-proxy run` that Claude Code starts works on: the `--index` its registered entry passes
(or the entry's `env` `MEMORY_INDEX`), else, as `run` itself, `MEMORY_INDEX`, else proxy.toml's `index`. Then the
index named to doctor itself (`--index`, or without a registered server `MEMORY_INDEX`, else proxy.toml), when that is
another: both are checked, each line saying where its index came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from client_proxy.config import ProxyConfig, check_index_name
from client_proxy.errors import ConfigError

INDEX_OPTION: Final = "--index"
INDEX_VARIABLE: Final = "MEMORY_INDEX"
# Claude Code expands `${VAR}` and `${VAR:-default}` in an MCP server's `args` and `env`.
_VARIABLE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class IndexChoice:
    """An index to check, and where it was named, as the check's line says it (`source`)."""

    name: str | None  # None: what was named is not a valid index name (`fault`, never repeating it)
    source: str
    registered: bool = False  # named by Claude Code's registered server (`install-claude --index` changes it)
    fault: str = ""
    fix: str = ""


def choose(
    registered: tuple[str, Mapping[str, Any]] | None,
    flag: str | None,
    env: Mapping[str, str],
    config: ProxyConfig,
) -> list[IndexChoice]:
    """The indexes to check, Claude Code's first (see the module's docstring); empty when none is named anywhere.
    `registered`: where our MCP server is registered and its entry; `flag`: doctor's `--index`."""
    toml = f"from {config.home / 'proxy.toml'}"
    variable = env.get(INDEX_VARIABLE) or None
    choices: list[IndexChoice] = []
    if registered is not None:
        place, entry = registered
        by_claude = f"Claude Code's MCP server in {place}"
        named = entry_index(entry, env)
        if named is not None:
            choices.append(_checked(named, f"as {by_claude} names it", registered=True))
        elif variable is not None:
            choices.append(_checked(variable, f"from {INDEX_VARIABLE}, as {by_claude} takes it", registered=True))
        elif config.index is not None:
            choices.append(_checked(config.index, f"{toml}, as {by_claude} takes it", registered=True))
    if flag is not None:
        asked: IndexChoice | None = _checked(flag, f"from {INDEX_OPTION}")
    elif registered is None and variable is not None:
        asked = _checked(variable, f"from {INDEX_VARIABLE}")
    elif registered is None and config.index is not None:
        asked = _checked(config.index, toml)
    else:
        asked = None
    if asked is not None and not (choices and choices[0].name == asked.name and asked.name is not None):
        choices.append(asked)
    return choices


def entry_index(entry: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The index an entry of our MCP server names: its last `--index` argument (as `memory-proxy run` reads them),
    else its `env`'s `MEMORY_INDEX`; with Claude Code's `${VAR}` expanded from `env`. None when it names none."""
    args = entry.get("args")
    named: object = None
    words = iter(args if isinstance(args, list) else [])
    for word in words:
        if word == INDEX_OPTION:
            named = next(words, None)
        elif isinstance(word, str) and word.startswith(INDEX_OPTION + "="):
            named = word.removeprefix(INDEX_OPTION + "=")
    if named is None:
        variables = entry.get("env")
        named = variables.get(INDEX_VARIABLE) if isinstance(variables, dict) else None
    if not isinstance(named, str):
        return None
    return _VARIABLE.sub(lambda found: env.get(found[1]) or found[2] or "", named)


def _checked(name: str, source: str, *, registered: bool = False) -> IndexChoice:
    try:
        return IndexChoice(check_index_name(name), source, registered)
    except ConfigError as exc:  # its message does not repeat the name: it may be a secret pasted in the wrong place
        fix = "memory-proxy install-claude --index NAME" if registered else "name an index the operator granted"
        return IndexChoice(None, source, registered, f"{exc} ({source})", fix)
