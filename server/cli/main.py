"""`memory-server`: serve memory indexes, and index, search and inspect them from the command line."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from server.cli import backup as backup_cli
from server.cli import config as config_cli
from server.cli import migrate as migrate_cli
from server.cli import selfcheck, serve
from server.cli import status as status_cli
from server.errors import EngineError, InvalidArgumentError, MemoryServerError
from server.index.embeddings.base import Embedder
from server.index.engine import MemoryIndex
from server.index.hits import SearchResult
from server.index.indexer import count_memory_files
from server.index.search import MAX_LIMIT, build_options
from server.observe import logs
from server.settings import Settings
from syncproto.paths import set_extra_folders
from syncproto.progress import Progress


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-server", description=__doc__)
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="a TOML file of settings (env MEMORY_CONFIG; none by default); the environment wins over it",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=settings.data_dir,
        help=f"where indexes live (env MEMORY_DATA_DIR; default {settings.data_dir})",
    )
    parser.add_argument(
        "--keys-dir",
        type=Path,
        default=settings.keys_dir,
        help=f"where key material lives (env MEMORY_KEYS_DIR; default {settings.keys_dir})",
    )
    parser.add_argument("--log-level", default=settings.log_level, choices=["debug", "info", "warning", "error"])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    index = commands.add_parser("index", help="index a folder of memory files")
    index.add_argument("folder", type=Path, help="folder holding MEMORY.md and memory/")
    index.add_argument("--index", required=True, dest="index_name", metavar="NAME")
    index.add_argument("--force", action="store_true", help="re-chunk every file (embeddings stay cached)")
    index.add_argument("--json", action="store_true", help="print the report as JSON")
    index.set_defaults(func=cmd_index)

    search = commands.add_parser("search", help="search an index")
    search.add_argument("query", nargs="?", help="what to look for")
    search.add_argument("--index", required=True, dest="index_name", metavar="NAME")
    search.add_argument("--limit", type=int, help=f"hits to return, 1-{MAX_LIMIT} (default: max_results, 8)")
    search.add_argument("--min-score", type=float, help="drop hits scoring below this (default: min_score, auto)")
    search.add_argument("--mmr-lambda", type=float, help="1: relevance order; lower: more variety (default: 1)")
    search.add_argument("--recency-half-life", type=float, metavar="DAYS", help="boost recent daily logs (0: off)")
    search.add_argument("--rerank", action=argparse.BooleanOptionalAction, help="rerank with Voyage (needs its key)")
    search.add_argument("--source", action="append", dest="sources", choices=["memory", "sessions"])
    search.add_argument("--path", dest="path_prefix", help="only files under this relative path prefix")
    search.add_argument("--from", dest="date_from", metavar="YYYY-MM-DD", help="daily logs from this day")
    search.add_argument("--to", dest="date_to", metavar="YYYY-MM-DD", help="daily logs up to this day")
    search.add_argument("--mode", default="auto", choices=["auto", "hybrid", "vector", "keyword"])
    search.add_argument("--json", action="store_true", help="print hits as JSON")
    search.add_argument(
        "--queries",
        type=Path,
        metavar="FILE.jsonl",
        help='run many queries: one {"id", "query"} per line in, one JSON line per query out',
    )
    search.set_defaults(func=cmd_search)

    status = commands.add_parser("status", help="show what an index holds (read only: changes nothing)")
    status.add_argument("--index", required=True, dest="index_name", metavar="NAME")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    _register_admin(commands)
    serve.register(commands, settings)
    config_cli.register(commands)
    backup_cli.register(commands)
    migrate_cli.register(commands)
    selfcheck.register(commands)
    return parser


def _register_admin(commands: Any) -> None:
    try:
        admin_cli = importlib.import_module("server.cli.admin")
    except ModuleNotFoundError:  # the key management commands ship with the channel
        return
    admin_cli.register(commands)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = Settings.from_env(os.environ, config_file=_config_option(argv))
    except InvalidArgumentError as exc:
        print(f"memory-server: configuration error: {config_cli.without_secrets(str(exc))}", file=sys.stderr)
        return 2
    args = build_parser(settings).parse_args(argv)
    logs.configure(args.log_level, settings.log_format)
    settings.warn_of_overridden_keys()
    args.settings = settings
    set_extra_folders(settings.extra_paths)  # the path rules every command (and the sync endpoints) apply
    try:
        return int(args.func(args))
    except InvalidArgumentError as exc:
        print(f"memory-server: error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        print(f"memory-server: error: {exc}", file=sys.stderr)
        return 1
    except MemoryServerError as exc:  # the rest of the tree (an unsafe keys folder...): the operator's to fix
        print(f"memory-server: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _config_option(argv: list[str]) -> Path | None:
    """`--config PATH`, read before the parser is built: the settings it names give the parser its defaults."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--config", type=Path)
    return early.parse_known_args(argv)[0].config  # type: ignore[no-any-return]


def _embedder(args: argparse.Namespace) -> Embedder | None:
    settings: Settings = args.settings
    return settings.select_embedder(os.environ)[0]


def _open(args: argparse.Namespace, *, create: bool = False) -> MemoryIndex:
    return MemoryIndex.open(
        args.data_dir,
        args.index_name,
        _embedder(args),
        create=create,
        settings=args.settings.with_reranker(os.environ).engine.for_index(args.index_name),
    )


# commands -------------------------------------------------------------------------------------------------


def cmd_index(args: argparse.Namespace) -> int:
    index = _open(args, create=True)
    try:
        progress = Progress(count_memory_files(args.folder), "indexing")
        report = index.index(args.folder, on_seen=progress.step)
    finally:
        index.close()
    if args.json:
        print(json.dumps(report.__dict__))
    else:
        print(
            f"indexed {args.folder} into {args.index_name!r}: {report.files_seen} files seen, "
            f"{report.files_indexed} indexed, {report.files_unchanged} unchanged, {report.files_removed} removed; "
            f"{report.chunks_written} chunks written, {report.chunks_embedded} embedded, "
            f"{report.chunks_pending} waiting for vectors ({report.seconds:.2f} s)"
        )
        for path, reason in report.skipped:
            print(f"  skipped {path}: {reason}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.queries is None):
        raise InvalidArgumentError("give either a QUERY or --queries FILE.jsonl")
    options = build_options(
        defaults=args.settings.engine.for_index(args.index_name).search,
        limit=args.limit,
        min_score=args.min_score,
        sources=args.sources,
        path_prefix=args.path_prefix,
        date_from=args.date_from,
        date_to=args.date_to,
        mode=args.mode,
        mmr_lambda=args.mmr_lambda,
        recency_half_life_days=args.recency_half_life,
        rerank=args.rerank,
    )
    index = _open(args)
    try:
        if args.queries is not None:
            return _search_many(index, args.queries, options, sys.stdout)
        result = index.search(args.query, options)
    finally:
        index.close()
    if args.json:
        print(json.dumps(_result_json(result, args.query)))
    else:
        _print_result(result, args.query)
    return 0


def _search_many(index: MemoryIndex, path: Path, options: Any, out: TextIO) -> int:
    failures = 0
    for number, entry in _read_queries(path):
        if isinstance(entry, str):
            failures += 1
            out.write(json.dumps({"line": number, "error": entry}) + "\n")
            continue
        try:
            result = index.search(entry["query"], options)
        except InvalidArgumentError as exc:
            failures += 1
            out.write(json.dumps({"id": entry["id"], "error": str(exc)}) + "\n")
            continue
        out.write(json.dumps({"id": entry["id"], **_result_json(result, entry["query"])}) + "\n")
    return 1 if failures else 0


def _read_queries(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line number, {"id", "query"}) per line, or an error message for a line that is not one."""
    try:
        handle = path.open(encoding="utf-8", errors="strict")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror}") from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    yield number, "not a JSON object"
                    continue
                if not isinstance(entry, dict) or not isinstance(entry.get("query"), str) or "id" not in entry:
                    yield number, 'each line must be an object with "id" and a string "query"'
                    continue
                yield number, entry
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"{path} is not UTF-8 text") from exc


def _result_json(result: SearchResult, query: str) -> dict[str, Any]:
    return {
        "query": query,
        "search_mode": result.mode,
        "notice": result.notice,
        "hits": [hit.as_dict() for hit in result.hits],
    }


def _print_result(result: SearchResult, query: str) -> None:
    print(f"[{result.mode}] {len(result.hits)} hits for {query!r}")
    if result.notice:
        print(f"note: {result.notice}")
    for rank, hit in enumerate(result.hits, start=1):
        heading = f"  ({hit.heading})" if hit.heading else ""
        print(f"{rank:2}. {hit.score:.3f}  {hit.citation}{heading}")
        print(f"    {hit.snippet}")


def cmd_status(args: argparse.Namespace) -> int:
    """Read-only (`server.cli.status`): never migrates the database or starts the engine's background work."""
    report = status_cli.read_status(args.data_dir, args.index_name, _embedder(args))
    if args.json:
        print(json.dumps(report.as_json()))
    else:
        status_cli.print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
