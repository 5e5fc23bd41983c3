"""An SQLite deployment's indexes copied into PostgreSQL (`memory-server migrate --to postgres`).

The markdown files are the truth: each index's mirror first records what changed on its disk (as a serving server
would), then every live file's bytes go into `files.content` beside its state. What the SQLite state database
holds goes along unchanged, so laptops carry on where they were: the revision counter, tombstones, the version
history with its stored versions (merge bases), idempotency records and each caller's last sync. The search index
(`index.sqlite3`) is not copied: it stays in the data folder as each replica's local cache, rebuilt from the files
when missing. An index is copied in one transaction, into an empty schema only (revision 0, no file and no row in
any of CARRIED_TABLES), streamed row by row (its size is not bounded by the memory of the machine running the copy);
nothing is written to the SQLite side but the mirror's own record of disk changes. An index whose schema already
holds exactly its content (`copied`: a rerun after another index failed, or of a finished migration) is left as it
is. Nothing in the target is ever deleted or overwritten: a schema holding anything is skipped or refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from server.errors import EngineError, InvalidArgumentError, MemoryServerError
from server.index.naming import NAME_PATTERN
from server.mirror import queries as mirror_queries
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
    """One index of the SQLite side, checked: its disk changes recorded and every live file readable text."""

    name: str
    directory: Path


def sqlite_indexes(data_dir: Path) -> list[str]:
    """The names of the indexes with a mirror state in `data_dir`, sorted."""
    root = data_dir / "indexes"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if NAME_PATTERN.match(p.name) and (p / STATE_FILE).is_file())


def read_sqlite_index(data_dir: Path, name: str) -> SqliteIndex:
    """Index `name` of the SQLite deployment at `data_dir`, its disk changes recorded first and every live file
    read once (and let go: the copy reads each again, so an index of any size takes one file's memory).
    InvalidArgumentError when a live file cannot be read (the database holds only readable text)."""
    directory = data_dir / "indexes" / name
    mirror = Mirror(directory)
    try:
        unreadable: dict[str, str] = {}
        for state in mirror.reconcile_all():
            try:
                mirror.read(state.path)
            except MemoryServerError as exc:
                unreadable[state.path] = str(exc)
        unreadable.update(mirror.unreadable)
    finally:
        mirror.close()
    if unreadable:
        listed = "; ".join(f"{path}: {why}" for path, why in sorted(unreadable.items())[:5])
        raise InvalidArgumentError(
            f"index {name!r} holds {len(unreadable)} file(s) that cannot be read as text ({listed}); fix or remove "
            "them in the data folder and migrate again"
        )
    return SqliteIndex(name, directory)


def target_content(url: str, name: str) -> tuple[int, int] | None:
    """(revision, live files) of index `name` in the database at `url` when it holds anything there (a row of
    CARRIED_TABLES too: a laptop's sync of an index with no file yet), else None."""
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
        files, rows = _held(db, schema)
    finally:
        db.close()
    return None if revision == 0 and files == 0 and rows == 0 else (revision, files)


def _held(db: PgConnection, schema: str) -> tuple[int, int]:
    """(live files, rows of CARRIED_TABLES) in index schema `schema`: with revision 0, both 0 is an empty one."""
    tables = " + ".join(f'(SELECT count(*) FROM "{schema}".{table})' for table in CARRIED_TABLES)
    row = db.execute(f'SELECT (SELECT count(*) FROM "{schema}".files WHERE hash IS NOT NULL), {tables}').fetchall()
    return int(row[0][0]), int(row[0][1])


def copied(url: str, data_dir: Path, name: str) -> bool:
    """True when index `name`'s schema at `url` holds what its SQLite state does once its disk changes are recorded:
    the same revision and the same state (hash, revision) of every path, tombstones included. An index is copied in
    one transaction, so that is a finished copy of this data folder, which a rerun skips; anything else (a replica
    wrote since, another deployment's data) differs."""
    directory = data_dir / "indexes" / name
    mirror = Mirror(directory)
    try:
        mirror.reconcile_all()
    finally:
        mirror.close()
    with _read_only(directory / STATE_FILE) as state:
        state.execute("BEGIN")
        revision = int(state.execute(*mirror_queries.current_revision()).fetchall()[0][0])  # type: ignore[arg-type]
        source = _states_digest(state.execute("SELECT path, hash, revision FROM files ORDER BY path"))
        state.execute("COMMIT")
    db = PgConnection(url, schema_of(name))
    try:
        held = int(db.execute(*q.current_revision()).fetchall()[0][0])
        # COLLATE "C" orders by code point, as SQLite's BINARY does for UTF-8
        target = _states_digest(db.execute('SELECT path, hash, revision FROM files ORDER BY path COLLATE "C"'))
    finally:
        db.close()
    return (held, target) == (revision, source)


def _states_digest(rows: Iterable[Any]) -> str:
    digest = hashlib.sha256()
    for path, file_hash, revision in rows:
        digest.update(json.dumps([str(path), file_hash, int(revision)]).encode("utf-8") + b"\n")
    return digest.hexdigest()


def write_index(url: str, source: SqliteIndex) -> Carried:
    """Copy `source` into its schema at `url` in one transaction, row by row from one snapshot of its state (no
    more than one file or row in memory at once); InvalidArgumentError when the schema holds anything
    already (checked under the index's revision lock, so a server writing meanwhile is noticed), EngineError when
    a file changed since that snapshot (nothing is kept of the copy). Holding anything includes a row of
    CARRIED_TABLES: a copy never adds to (nor clears) what a server recorded there."""
    schema = schema_of(source.name)
    db = PgConnection(url, schema)
    mirror = Mirror(source.directory)
    try:
        migrate(db, schema)
        with _read_only(source.directory / STATE_FILE) as state, db:
            state.execute("BEGIN")  # one snapshot of the SQLite state for every read below
            revision = int(state.execute(*mirror_queries.current_revision()).fetchall()[0][0])  # type: ignore[arg-type]
            held = int(db.execute(*q.lock_revision()).fetchall()[0][0])
            files, rows = _held(db, schema)
            if held or files or rows:
                raise InvalidArgumentError(not_empty(source.name, held, files))
            live = tombstones = 0
            for path, digest, size, lines, rev, by, at in state.execute(
                f"SELECT {STATE_COLUMNS} FROM files ORDER BY revision"
            ):
                data = None if digest is None else _content(mirror, source.name, str(path), str(digest))
                live, tombstones = live + (data is not None), tombstones + (data is None)
                db.execute(
                    "INSERT INTO files(path, hash, size, lines, revision, updated_by, updated_at, content)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                    (path, digest, size, lines, rev, by, at, data),
                )
            counts = {table: _carry(state, db, table) for table in CARRIED_TABLES}
            db.execute("UPDATE meta SET revision = ? WHERE id = 1", (revision,))
            state.execute("COMMIT")
    finally:
        mirror.close()
        db.close()
    return Carried(source.name, revision, live, tombstones, counts)


def _content(mirror: Mirror, name: str, path: str, digest: str) -> bytes:
    """A live file's bytes, as the snapshot's state says they are (EngineError when they changed since)."""
    try:
        held = mirror.read(path)
    except MemoryServerError:
        held = None
    data = encoded(held.text) if held is not None else b""
    if held is None or sha256_hex(data) != digest:
        raise EngineError(f"index {name!r} changed while it was read ({path}); stop the server and migrate again")
    return data


def _carry(state: apsw.Connection, db: PgConnection, table: str) -> int:
    """One of CARRIED_TABLES copied across in its own rows; how many."""
    columns = CARRIED_TABLES[table]
    marks = ", ".join("?" for _ in columns.split(","))
    count = 0
    for row in state.execute(f"SELECT {columns} FROM {table}"):
        db.execute(f"INSERT INTO {table}({columns}) VALUES({marks})", tuple(row))
        count += 1
    return count


def not_empty(name: str, revision: int, files: int) -> str:
    held = f"{files} file(s) at revision {revision}" if revision or files else "no file but records of its use"
    return (
        f"index {name!r} already holds {held} in the database (schema "
        f"{schema_of(name)}), not what the data folder holds: nothing was copied. An index copied by an earlier "
        "run is skipped only while the two match; to start again, drop that schema (DROP SCHEMA ... CASCADE) or "
        "use an empty database"
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
