"""`memory-proxy search`, `get`, `write`, `list`, `history` and `restore`: the MCP tools of the same names, run
on the server from a terminal through the sealed channel, with this laptop's key. Human-readable by default,
`--json` for scripts (the tool's structured result, exactly as an agent gets it, its control characters escaped).

A result becomes text in one place, `_shown`: an answer of the wrong shape (a buggy or hostile server) ends as
one `RemoteCallError`, never a traceback that would echo it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from client_proxy.errors import ProxyError
from client_proxy.remote import render
from client_proxy.remote.connection import Remote, connect
from client_proxy.remote.mcp_session import RemoteCallError
from client_proxy.settings import RunSettings
from syncproto.wire import MAX_WRITE_BYTES

LIST_PAGE: Final = 200  # the tool's largest page
Job = Callable[[Remote], Awaitable[tuple[str, int]]]  # what to print, and the exit status


def add_commands(commands: Any) -> None:
    """Register the four commands on `memory-proxy`'s subparsers."""
    search = _command(commands, "search", "search memory on the server (hybrid: meaning and keywords)")
    search.add_argument("query", help="what to look for, in plain words")
    search.add_argument(
        "-n", "--max-results", type=int, metavar="N", help="hits to return (default: the server's, as agents get)"
    )
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
    get.epilog = "Exits 1 when the file does not exist (after saying so, or printing the answer's JSON)."
    get.set_defaults(func=cmd_get)

    write = _command(commands, "write", "store a note (default: append to today's daily log)")
    stdin_cap = f"{MAX_WRITE_BYTES // 1024} KiB"
    write.add_argument("content", nargs="?", help=f"the markdown text (default: read from stdin, at most {stdin_cap})")
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
    return _call(args, "get", arguments, render.get, status=lambda result: 0 if result.get("exists") else 1)


def cmd_write(args: argparse.Namespace) -> int:
    content = args.content if args.content is not None else _read_stdin()
    if not content.strip():
        raise ProxyError("nothing to write: give the text as an argument or on stdin")
    arguments = {"content": content, "path": args.path, "mode": args.mode, "topic": args.topic}
    arguments.update(heading=args.heading, expected_hash=args.expected_hash, idempotency_key=args.idempotency_key)
    return _call(args, "write", arguments, render.write)


def _read_stdin() -> str:
    """The text piped in: bytes up to one past the write cap (an endless pipe must not fill the memory), strict
    UTF-8. A closed stdin (`<&-`, which Python gives as None) holds nothing."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return ""
    data: bytes = stream.read(MAX_WRITE_BYTES + 1)
    if len(data) > MAX_WRITE_BYTES:
        raise ProxyError(
            f"stdin holds more than {MAX_WRITE_BYTES // 1024} KiB, the most one write takes; split it into parts"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProxyError(
            f"stdin is not UTF-8 text (at byte {exc.start + 1}): convert it first, e.g. iconv -f latin1 -t utf-8"
        ) from None


def cmd_history(args: argparse.Namespace) -> int:
    arguments = {"path": args.path, "deleted": args.deleted, "before": args.before, "limit": args.limit}
    return _call(args, "history", arguments, render.history)


def cmd_restore(args: argparse.Namespace) -> int:
    return _call(args, "restore", {"path": args.path, "version": args.version}, render.restore)


def _call(
    args: argparse.Namespace,
    tool: str,
    arguments: dict[str, Any],
    human: Callable[[dict[str, Any]], str],
    status: Callable[[dict[str, Any]], int] = lambda _result: 0,
) -> int:
    async def job(remote: Remote) -> tuple[str, int]:
        result = await remote.tool(tool, **arguments)
        return _shown(tool, render.as_json if args.json else human, result), status(result)

    return _run(args, job)


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise ProxyError("--limit must be at least 1")

    async def job(remote: Remote) -> tuple[str, int]:
        files: list[Any] = []
        cursor: str | None = None
        asked: list[str] = []  # the cursors sent so far
        most_pages = 0  # what the first answer's total needs, and one more for files added meanwhile
        while True:
            page = await remote.tool(
                "list",
                prefix=args.prefix,
                date_from=args.date_from,
                date_to=args.date_to,
                cursor=cursor,
                limit=LIST_PAGE,
            )
            entries, total, cursor = _list_page(page)
            most_pages = most_pages or total // LIST_PAGE + 1
            files += entries  # so at most most_pages * LIST_PAGE in all
            if cursor is None or (args.limit is not None and len(files) >= args.limit):
                break
            if cursor in asked:
                raise RemoteCallError("the server's list of files does not end: it named a page it had sent already")
            if len(asked) + 1 >= most_pages:
                pages = f"{most_pages} page{'s' if most_pages > 1 else ''} of {LIST_PAGE}"
                raise RemoteCallError(
                    f"the server's list of files does not end: the {total} files it counted fit in {pages}, "
                    "and it named one more"
                )
            asked.append(cursor)
        files = files[: args.limit] if args.limit is not None else files
        if args.json:
            return _shown("list", render.as_json, {"files": files, "total": total}), 0
        return _shown("list", render.listing, files, total), 0

    return _run(args, job)


def _list_page(page: dict[str, Any]) -> tuple[list[Any], int, str | None]:
    """A memory_list answer's files, total and next cursor, checked for shape; `RemoteCallError` otherwise."""
    files, total, cursor = page.get("files"), page.get("total"), page.get("next_cursor")
    if not isinstance(files, list) or len(files) > LIST_PAGE:
        raise _malformed("list")
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise _malformed("list")
    if cursor is not None and not isinstance(cursor, str):
        raise _malformed("list")
    return files, total, cursor or None


def _shown(tool: str, show: Callable[..., str], *result: Any) -> str:
    """The one place an answer becomes text. A result of the wrong shape is the server's fault: said in one line,
    without the answer (the renderers' KeyError, TypeError, ValueError and kin, and nesting too deep to walk)."""
    try:
        return show(*result)
    except (LookupError, TypeError, ValueError, AttributeError, RecursionError):
        raise _malformed(tool) from None


def _malformed(tool: str) -> RemoteCallError:
    return RemoteCallError(f"the server's answer to memory_{tool} was malformed")


def _run(args: argparse.Namespace, job: Job) -> int:
    settings = RunSettings.from_env(os.environ, index=args.index, project=None, log_file=None)

    async def main() -> tuple[str, int]:
        async with connect(settings) as remote:
            return await job(remote)

    text, status = anyio.run(main)
    sys.stdout.write(text)
    return status
