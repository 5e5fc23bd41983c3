"""`memory-proxy search`, `get`, `write`, `list`, `history` and `restore`: the MCP tools of the same names, run
on the server from a terminal through the sealed channel, with this laptop's key. Human-readable by default,
`--json` for scripts (the tool's structured result, exactly as an agent gets it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from client_proxy.errors import ProxyError
from client_proxy.remote import render
from client_proxy.remote.connection import Remote, connect
from client_proxy.settings import RunSettings

LIST_PAGE: Final = 200  # the tool's largest page
Job = Callable[[Remote], Awaitable[str]]


def add_commands(commands: Any) -> None:
    """Register the four commands on `memory-proxy`'s subparsers."""
    search = _command(commands, "search", "search memory on the server (hybrid: meaning and keywords)")
    search.add_argument("query", help="what to look for, in plain words")
    search.add_argument("-n", "--max-results", type=int, default=8, metavar="N", help="hits to return (default 8)")
    search.add_argument(
        "--min-score", type=float, metavar="S", help="drop hits below this score, 0-1 (default: the server's)"
    )
    search.add_argument("--path", metavar="PREFIX", help="only files under this path, e.g. memory/")
    search.add_argument("--source", choices=("memory", "sessions"), action="append", help="only this source")
    search.add_argument("--from", dest="date_from", metavar="YYYY-MM-DD", help="only daily logs from this day")
    search.add_argument("--to", dest="date_to", metavar="YYYY-MM-DD", help="only daily logs up to this day")
    search.set_defaults(func=cmd_search)

    get = _command(commands, "get", "print a memory file (or some of its lines, or one section) with line numbers")
    get.add_argument("path", help="MEMORY.md or memory/<folders>/<name>.md")
    get.add_argument("--start", type=int, metavar="LINE", help="first line, 1-based")
    get.add_argument("--end", type=int, metavar="LINE", help="last line, inclusive")
    get.add_argument("--heading", metavar="TEXT", help="only this section, e.g. 'Decisions'")
    get.add_argument("--start-char", type=int, metavar="N", help="with --start: from this character of that line")
    get.set_defaults(func=cmd_get)

    write = _command(commands, "write", "store a note (default: append to today's daily log)")
    write.add_argument("content", nargs="?", help="the markdown text (default: read from stdin)")
    write.add_argument("--path", help="target file (default: today's daily log memory/YYYY-MM-DD.md)")
    write.add_argument("--mode", choices=("append", "replace"), default="append")
    write.add_argument("--topic", help="short title: appends go under '## HH:MM — topic'")
    write.add_argument("--heading", help="write to this section only")
    write.add_argument("--expected-hash", metavar="SHA256", help="replace only if the file (section) is still this")
    write.add_argument("--idempotency-key", metavar="KEY", help="a retried call with the same key writes only once")
    write.set_defaults(func=cmd_write)

    listing = _command(commands, "list", "list memory files with size, lines and who changed them when")
    listing.add_argument("--prefix", help="only paths starting with this, e.g. memory/")
    listing.add_argument("--from", dest="date_from", metavar="YYYY-MM-DD", help="only daily logs from this day")
    listing.add_argument("--to", dest="date_to", metavar="YYYY-MM-DD", help="only daily logs up to this day")
    listing.add_argument("--limit", type=int, metavar="N", help="at most N files (default: all)")
    listing.set_defaults(func=cmd_list)

    history = _command(commands, "history", "list past versions of a file (or recent changes, or deleted files)")
    history.add_argument("path", nargs="?", help="the file (default: the recent changes of every file)")
    history.add_argument("--deleted", action="store_true", help="list the files deleted now, to restore")
    history.add_argument("--before", type=int, metavar="VERSION", help="older than this version (paging)")
    history.add_argument("--limit", type=int, default=20, metavar="N", help="versions to show (default 20)")
    history.set_defaults(func=cmd_history)

    restore = _command(commands, "restore", "bring back a past version of a file as a new version (undoable)")
    restore.add_argument("path", help="MEMORY.md or memory/<folders>/<name>.md")
    restore.add_argument("version", type=int, help="the version to bring back, from `memory-proxy history`")
    restore.set_defaults(func=cmd_restore)


def _command(commands: Any, name: str, summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=f"{summary} (through the server)",
        description=f"{summary[0].upper()}{summary[1:]}: the MCP tool memory_{name}, run on the server through the "
        "encrypted channel with this device's key.",
    )
    parser.add_argument("--index", metavar="NAME", help="the index (else $MEMORY_INDEX, else proxy.toml)")
    parser.add_argument("--json", action="store_true", help="print the tool's structured result as JSON")
    return parser


def cmd_search(args: argparse.Namespace) -> int:
    arguments = {"query": args.query, "max_results": args.max_results, "min_score": args.min_score}
    arguments.update(path=args.path, sources=args.source, date_from=args.date_from, date_to=args.date_to)
    return _call(args, "search", arguments, render.search)


def cmd_get(args: argparse.Namespace) -> int:
    arguments = {"path": args.path, "start_line": args.start, "end_line": args.end, "heading": args.heading}
    arguments.update(start_char=args.start_char)
    return _call(args, "get", arguments, render.get)


def cmd_write(args: argparse.Namespace) -> int:
    content = args.content if args.content is not None else sys.stdin.read()
    if not content.strip():
        raise ProxyError("nothing to write: give the text as an argument or on stdin")
    arguments = {"content": content, "path": args.path, "mode": args.mode, "topic": args.topic}
    arguments.update(heading=args.heading, expected_hash=args.expected_hash, idempotency_key=args.idempotency_key)
    return _call(args, "write", arguments, render.write)


def cmd_history(args: argparse.Namespace) -> int:
    arguments = {"path": args.path, "deleted": args.deleted, "before": args.before, "limit": args.limit}
    return _call(args, "history", arguments, render.history)


def cmd_restore(args: argparse.Namespace) -> int:
    return _call(args, "restore", {"path": args.path, "version": args.version}, render.restore)


def _call(
    args: argparse.Namespace, tool: str, arguments: dict[str, Any], human: Callable[[dict[str, Any]], str]
) -> int:
    async def job(remote: Remote) -> str:
        result = await remote.tool(tool, **arguments)
        return _dump(result) if args.json else human(result)

    return _run(args, job)


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise ProxyError("--limit must be at least 1")

    async def job(remote: Remote) -> str:
        files: list[dict[str, Any]] = []
        cursor, total = None, 0
        while True:
            page = await remote.tool(
                "list",
                prefix=args.prefix,
                date_from=args.date_from,
                date_to=args.date_to,
                cursor=cursor,
                limit=LIST_PAGE,
            )
            files += page["files"]
            total, cursor = page["total"], page.get("next_cursor")
            if not cursor or (args.limit is not None and len(files) >= args.limit):
                break
        files = files[: args.limit] if args.limit is not None else files
        if args.json:
            return _dump({"files": files, "total": total})
        return render.listing(files, total)

    return _run(args, job)


def _run(args: argparse.Namespace, job: Job) -> int:
    settings = RunSettings.from_env(os.environ, index=args.index, project=None, log_file=None)

    async def main() -> str:
        async with connect(settings) as remote:
            return await job(remote)

    sys.stdout.write(anyio.run(main))
    return 0


def _dump(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, ensure_ascii=False) + "\n"
