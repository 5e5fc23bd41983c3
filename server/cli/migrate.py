"""`memory-server migrate --to postgres`: an SQLite deployment's indexes copied into the PostgreSQL database at
`MEMORY_DATABASE_URL`, to serve them from several replicas (docs/deploy.md, "Past one machine").

Run it with the server stopped. Each index is copied in one transaction into an empty schema. An index the
database already holds exactly (copied by an earlier run) is skipped, and one holding anything else is refused
before anything is copied, so a failed migration can simply be run again and a finished one changes nothing. The
data folder is left as it was (its `index.sqlite3` stays a usable search cache).
"""

from __future__ import annotations

import argparse
from typing import Any

from server.errors import InvalidArgumentError

NO_DATABASE = (
    "set MEMORY_DATABASE_URL (or database_url in the config file) to the PostgreSQL database to migrate into, "
    "e.g. postgresql://memory:PASSWORD@db:5432/memory"
)


def register(commands: Any) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="copy the data folder's indexes (files, revisions, tombstones, history) into PostgreSQL",
        description=__doc__,
    )
    migrate.add_argument("--to", required=True, choices=["postgres"], help="the backend to copy into")
    migrate.add_argument(
        "--index",
        action="append",
        dest="indexes",
        metavar="NAME",
        help="only this index (repeatable; default: every index in the data folder)",
    )
    migrate.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from server.postgres.from_sqlite import (
        copied,
        not_empty,
        read_sqlite_index,
        sqlite_indexes,
        target_content,
        write_index,
    )

    url = args.settings.database_url
    if not url:
        raise InvalidArgumentError(NO_DATABASE)
    found = sqlite_indexes(args.data_dir)
    names = args.indexes or found
    missing = sorted(set(names) - set(found))
    if missing:
        raise InvalidArgumentError(f"no index {', '.join(map(repr, missing))} in {args.data_dir / 'indexes'}")
    if not names:
        raise InvalidArgumentError(f"{args.data_dir / 'indexes'} holds no index to migrate")
    done: dict[str, tuple[int, int]] = {}
    for name in names:  # every target is looked at before anything is copied
        held = target_content(url, name)
        if held is not None:
            if not copied(url, args.data_dir, name):
                raise InvalidArgumentError(not_empty(name, *held))
            done[name] = held
    for name, (revision, files) in done.items():
        print(f"{name}: already in the database (revision {revision}, {files} files); skipped", flush=True)
    for name in (name for name in names if name not in done):
        carried = write_index(url, read_sqlite_index(args.data_dir, name))
        rows = ", ".join(f"{count} {table}" for table, count in carried.rows.items())
        print(
            f"{name}: revision {carried.revision}, {carried.files} files, {carried.tombstones} tombstones; {rows}",
            flush=True,
        )
    print(
        f"migrated {len(names) - len(done)} index(es) into PostgreSQL"
        f"{f' ({len(done)} already there)' if done else ''}. Serve with MEMORY_DATABASE_URL set; the search index "
        "is rebuilt from the files by each server that lacks one."
    )
    return 0
