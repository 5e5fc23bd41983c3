"""The `install-claude` and `hook` subcommands of `memory-proxy`, registered by `client_proxy.cli`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from client_proxy.claude.hooks import EVENTS, main_hook
from client_proxy.claude.install import LOCAL_SETTINGS_FILE, MCP_FILE, SETTINGS_FILE, install
from client_proxy.config import check_index_name
from client_proxy.sync.state import state_home

RECORDS_FOLDER = "claude-install"  # in the state folder: the files install-claude created, which --remove may delete

VERBS = {
    "added": "added to",
    "updated": "updated",
    "removed": "removed from",
    "unchanged": "already in",
    "absent": "nothing in",
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    claude = commands.add_parser(
        "install-claude",
        help="register memory-proxy with Claude Code for a project (MCP server and hooks); --remove undoes it",
        description=f"Adds the MCP server `memory` (memory-proxy run) to {MCP_FILE} and three hooks to "
        f"{SETTINGS_FILE}: SessionStart loads the project's memory, Stop and PreCompact remind the agent to save "
        "what it learned. Running it again changes nothing; --remove takes out only what it added. A file that is "
        "not valid JSON is refused and left as it is.",
    )
    claude.add_argument("--project", metavar="DIR", help="the project folder (default: the current directory)")
    claude.add_argument("--index", metavar="NAME", help="name this index in .mcp.json (default: proxy.toml's)")
    claude.add_argument(
        "--local", action="store_true", help=f"hooks in {LOCAL_SETTINGS_FILE} (yours only, not committed)"
    )
    claude.add_argument("--remove", action="store_true", help="take the server and the hooks out again")
    claude.set_defaults(func=cmd_install_claude)
    hook = commands.add_parser(
        "hook",
        help="what Claude Code's hooks run (installed by install-claude); reads the hook's JSON on stdin",
    )
    hook.add_argument("event", choices=EVENTS)
    hook.set_defaults(func=lambda args: main_hook(args.event))


def add_init_option(init: argparse.ArgumentParser) -> None:
    init.add_argument("--claude", action="store_true", help="also run install-claude for the project")


def cmd_install_claude(args: argparse.Namespace) -> int:
    project = Path(args.project or ".")
    index = check_index_name(args.index) if args.index else None
    records = state_home(os.environ) / RECORDS_FOLDER
    changes = install(project, index, remove=args.remove, local=args.local, records=records)
    for change in changes:
        what = "MCP server" if change.path.name == MCP_FILE.name else "hooks"
        print(f"{what} {VERBS[change.status]} {change.path}")
    if not args.remove and any(change.status == "added" for change in changes):
        print("Claude Code asks once to approve the project's MCP server; `memory-proxy doctor` checks the set-up.")
    return 0
