"""`memory-server status`: what an index holds, read without changing anything.

The engine's open (`MemoryIndex.open`) migrates the database, sets a damaged one aside, deletes stray database files
and starts background work (a vector rebuild, a re-chunk, the relabel after an upgrade): the server's business, not
an operator's report, which may well run beside a serving server of another version. So the report reads the live
database through a read-only connection of its own (beside a serving server it reads that server's WAL), starts no
thread and embeds nothing: an index an older version wrote is reported as it is and left for the server to upgrade
on its next start; one a newer version wrote is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import apsw

from server.errors import EngineError, UnknownIndexError
from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain, as_chain
from server.index.migrations import SCHEMA_VERSION
from server.index.naming import FILES_FOLDER, index_dir
from server.index.rechunk import live_database, present_database
from server.index.stats import index_counts
from server.index.status import CHUNKS_PER_SOURCE, IndexStatus
from server.index.store import database_bytes, is_corruption, read_only, vec_available
from server.index.vectors import space_in, vector_state

OLDER = "written by an older version (schema {found}; this one knows {known}); the server upgrades it on its next start"
NO_DATABASE = "it has no search index yet; the server builds one from its files on its next start"


@dataclass(frozen=True)
class Report:
    """The index's status, and what its schema means for this version (None: it is this version's)."""

    status: IndexStatus
    schema_notice: str | None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self.status), "schema_notice": self.schema_notice}


def read_status(data_dir: Path, name: str, embedder: Embedder | ProviderChain | None) -> Report:
    """The status of index `name`, read without writing anything. `embedder`: the providers this version would
    embed with, to say whether the live vectors are theirs (none is called)."""
    directory = index_dir(data_dir, name)
    if not (directory / "index.json").is_file():
        raise UnknownIndexError(f"there is no index named {name!r}")
    info = _description(directory)
    path = directory / live_database(info)
    root = info.get("root")
    providers = as_chain(embedder)
    vec = vec_available()
    empty = IndexStatus(
        name=name,
        root=root if isinstance(root, str) else None,
        provider=None,
        model=None,
        dimensions=None,
        files={},
        chunks={},
        pending_vectors=0,
        vector_state="off",
        search_modes=["keyword"],
        notice=None,
        last_change=None,
        database_bytes=database_bytes(path),
        schema_version=0,
        providers=providers.states(),
    )
    if not path.is_file() or path.stat().st_size == 0:
        return Report(empty, NO_DATABASE)
    try:
        with read_only(path, vec=vec) as db:
            found = int(db.execute("PRAGMA user_version").fetchall()[0][0])  # type: ignore[arg-type]
            if found > SCHEMA_VERSION:
                raise EngineError(
                    f"the index {name!r} was written by a newer version (schema {found}, this one knows "
                    f"{SCHEMA_VERSION}); report on it with that version"
                )
            status = _read(db, empty, providers, vec=vec)
    except apsw.Error as exc:
        if is_corruption(exc):
            raise EngineError(
                f"the index database {path.name} of {name!r} is damaged; the server sets it aside and rebuilds it "
                "from the files on its next start"
            ) from None
        raise EngineError(f"cannot read the index database {path.name} of {name!r} ({type(exc).__name__})") from None
    notice = OLDER.format(found=found, known=SCHEMA_VERSION) if found < SCHEMA_VERSION else None
    return Report(replace(status, schema_version=found), notice)


def _read(db: apsw.Connection, empty: IndexStatus, providers: ProviderChain, *, vec: bool) -> IndexStatus:
    """The counts, the live vectors' model and their state, from the database behind `db`. Every table read here
    is in every schema since the first."""
    counts = index_counts(db, vec_loaded=vec)
    chunks = {str(source): int(n) for source, n in db.execute(CHUNKS_PER_SOURCE)}
    meta = {str(key): str(value) for key, value in db.execute("SELECT key, value FROM meta")}
    live = space_in(meta.get)
    state, why = vector_state(providers, live, vec_loaded=vec)
    last = meta.get("last_change")
    return replace(
        empty,
        provider=live.provider if live else None,
        model=live.model if live else None,
        dimensions=live.dimensions if live else None,
        files=counts.files,
        chunks=chunks,
        pending_vectors=counts.pending_vectors or 0,
        vector_state=state,
        search_modes=["hybrid", "vector", "keyword"] if state == "ready" else ["keyword"],
        notice=why,
        last_change=float(last) if last else None,
    )


def _description(directory: Path) -> dict[str, Any]:
    """index.json; one that is not a JSON object is taken as the engine would rewrite it (the newest database in
    the folder, its files beside it), without writing it."""
    path = directory / "index.json"
    try:
        info = json.loads(path.read_text("utf-8"))
    except ValueError:  # not JSON, or not UTF-8
        info = None
    except OSError as exc:
        raise EngineError(f"the description of index {directory.name!r} is unreadable ({exc.strerror})") from None
    if isinstance(info, dict):
        return info
    files = directory / FILES_FOLDER
    return {"root": str(files.resolve()) if files.is_dir() else None, "database": present_database(directory)}


def print_report(report: Report) -> None:
    s = report.status
    model = f"{s.provider}/{s.model} ({s.dimensions} dimensions)" if s.model else "none"
    database = f"{s.database_bytes / 1024:.0f} KiB, schema {s.schema_version}"
    rows = [
        ("index", s.name),
        ("folder", s.root or "-"),
        ("model", model),
        ("vectors", s.vector_state + (f" — {s.notice}" if s.notice else "")),
        ("search modes", ", ".join(s.search_modes)),
        ("files", ", ".join(f"{k}: {v}" for k, v in sorted(s.files.items())) or "0"),
        ("chunks", ", ".join(f"{k}: {v}" for k, v in sorted(s.chunks.items())) or "0"),
        ("waiting for vectors", str(s.pending_vectors)),
        ("database", database + (f" — {report.schema_notice}" if report.schema_notice else "")),
    ]
    for key, value in rows:
        print(f"{key:>20}: {value}")
