"""An SQLite deployment's indexes copied into PostgreSQL (`memory-server migrate --to postgres`).

The markdown files are the truth: each index's mirror first records what changed on its disk (as a serving server
would), then every live file's bytes go into `files.content` beside its state. What the SQLite state database
holds goes along unchanged, so laptops carry on where they were: the revision counter, tombstones, the version
history with its stored versions (merge bases), idempotency records and each caller's last sync. The search index
(`index.sqlite3`) is not copied: it stays in the data folder as each replica's local cache, rebuilt from the files
when missing. An index is copied in one transaction, into an empty schema only; nothing is written to the SQLite
side but the mirror's own record of disk changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw

from server.errors import EngineError, InvalidArgumentError, MemoryServerError
from server.index.naming import NAME_PATTERN
from server.mirror.files import encoded
from server.mirror.mirror import Mirror
from server.mirror.state import STATE_COLUMNS
from server.postgres import queries as q
from server.postgres.connection import PgConnection, schema_of
from server.postgres.migrations import migrate
from syncproto.wire import sha256_hex

STATE_FILE = "state.sqlite3"
# The SQLite state's tables that go along as they are (same columns in PostgreSQL's schema, `migrations.M001_FILES`).
CARRIED_TABLES = {
    "versions": "hash, data, stored_at",
    "history": "revision, path, hash, size, change, updated_by, updated_at",
    "idempotency": "caller, key, request, result, created_at",
    "sync_callers": "caller, last_pull_at, pulled_revision, last_push_at, pushed_revision",
}


@dataclass(frozen=True)
class Carried:
    """What one index's copy holds: its revision and the rows of each kind."""

    name: str
    revision: int
    files: int
    tombstones: int
    rows: dict[str, int]  # table -> rows copied, for CARRIED_TABLES


@dataclass(frozen=True)
class SqliteIndex:
    """One index as read from the SQLite side: the files' states and bytes, and the other tables' rows."""

    name: str
    revision: int
    states: list[tuple[object, ...]]  # STATE_COLUMNS, tombstones too
    contents: dict[str, bytes]  # path -> bytes of each live file
    tables: dict[str, list[tuple[object, ...]]]


def sqlite_indexes(data_dir: Path) -> list[str]:
    """The names of the indexes with a mirror state in `data_dir`, sorted."""
    root = data_dir / "indexes"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if NAME_PATTERN.match(p.name) and (p / STATE_FILE).is_file())


def read_sqlite_index(data_dir: Path, name: str) -> SqliteIndex:
    """Index `name` of the SQLite deployment at `data_dir`, its disk changes recorded first. InvalidArgumentError
    when a live file cannot be read (the database holds only readable text): nothing is left behind."""
    directory = data_dir / "indexes" / name
    mirror = Mirror(directory)
    try:
        live = mirror.reconcile_all()
        contents, unreadable = {}, dict(mirror.unreadable)
        for state in live:
            try:
                held = mirror.read(state.path)
            except MemoryServerError as exc:
                unreadable[state.path] = str(exc)
                continue
            if held is not None:
                contents[state.path] = encoded(held.text)
    finally:
        mirror.close()
    if unreadable:
        listed = "; ".join(f"{path}: {why}" for path, why in sorted(unreadable.items())[:5])
        raise InvalidArgumentError(
            f"index {name!r} holds {len(unreadable)} file(s) that cannot be read as text ({listed}); fix or remove "
            "them in the data folder and migrate again"
        )
    with _read_only(directory / STATE_FILE) as db:
        revision = int(db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchall()[0][0])  # type: ignore[arg-type]
        states = [tuple(row) for row in db.execute(f"SELECT {STATE_COLUMNS} FROM files ORDER BY revision")]
        tables = {
            table: [tuple(row) for row in db.execute(f"SELECT {columns} FROM {table}")]
            for table, columns in CARRIED_TABLES.items()
        }
    for row in states:
        path, digest = str(row[0]), row[1]
        if digest is not None and sha256_hex(contents.get(path, b"")) != digest:
            raise EngineError(f"index {name!r} changed while it was read ({path}); stop the server and migrate again")
    return SqliteIndex(name, revision, states, contents, tables)


def target_content(url: str, name: str) -> tuple[int, int] | None:
    """(revision, live files) of index `name` in the database at `url` when it holds anything there, else None."""
    db = PgConnection(url)
    try:
        if not db.execute(*q.schema_exists(schema_of(name))).fetchall():
            return None
        schema = schema_of(name)
        tables = db.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name IN ('meta', 'files')",
            (schema,),
        ).fetchall()
        if int(tables[0][0]) < 2:
            return None
        revision = int(db.execute(f'SELECT revision FROM "{schema}".meta WHERE id = 1').fetchall()[0][0])
        files = int(db.execute(f'SELECT count(*) FROM "{schema}".files WHERE hash IS NOT NULL').fetchall()[0][0])
    finally:
        db.close()
    return None if revision == 0 and files == 0 else (revision, files)


def write_index(url: str, source: SqliteIndex) -> Carried:
    """Copy `source` into its schema at `url` in one transaction; InvalidArgumentError when the schema holds
    anything already (checked under the index's revision lock, so a server writing meanwhile is noticed)."""
    schema = schema_of(source.name)
    db = PgConnection(url, schema)
    try:
        migrate(db, schema)
        with db:
            revision = int(db.execute(*q.lock_revision()).fetchall()[0][0])
            files = int(db.execute("SELECT count(*) FROM files WHERE hash IS NOT NULL").fetchall()[0][0])
            if revision or files:
                raise InvalidArgumentError(not_empty(source.name, revision, files))
            for path, digest, size, lines, rev, by, at in source.states:
                data = source.contents.get(str(path)) if digest is not None else None
                db.execute(
                    "INSERT INTO files(path, hash, size, lines, revision, updated_by, updated_at, content)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                    (path, digest, size, lines, rev, by, at, data),
                )
            for table, rows in source.tables.items():
                columns = CARRIED_TABLES[table]
                marks = ", ".join("?" for _ in columns.split(","))
                for row in rows:
                    db.execute(f"INSERT INTO {table}({columns}) VALUES({marks})", row)
            db.execute("UPDATE meta SET revision = ? WHERE id = 1", (source.revision,))
    finally:
        db.close()
    tombstones = sum(1 for state in source.states if state[1] is None)
    counts = {table: len(rows) for table, rows in source.tables.items()}
    return Carried(source.name, source.revision, len(source.states) - tombstones, tombstones, counts)


def not_empty(name: str, revision: int, files: int) -> str:
    return (
        f"index {name!r} already holds {files} file(s) at revision {revision} in the database (schema "
        f"{schema_of(name)}): nothing was copied. A finished migration is not run twice; to start again, drop "
        "that schema (DROP SCHEMA ... CASCADE) or use an empty database"
    )


@contextmanager
def _read_only(path: Path) -> Iterator[apsw.Connection]:
    try:
        db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise EngineError(f"the mirror state {path.parent.name!r} cannot be opened") from exc
    try:
        db.set_busy_timeout(10_000)
        yield db
    finally:
        db.close()
