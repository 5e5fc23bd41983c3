"""The per-index metrics with PostgreSQL (`MEMORY_DATABASE_URL`): every index schema in the database, opened by this
server or not, counted at scrape time as `memory_status` counts it (`server.postgres.search_status`). Every replica
reports the same numbers: they are the database's, shared by all.

One connection a scrape, closed after it (no pool kept for a scraper that may never come), each statement bounded by
STATEMENT_TIMEOUT_MS; each index is read in one read-only snapshot.
"""

from __future__ import annotations

import logging

from server.errors import EngineError
from server.mirror.state import count_live_files
from server.observe.metrics import IndexSize, Visible
from server.postgres.connection import INDEX_SCHEMA_PREFIX, PgConnection
from server.postgres.search_status import index_counts, index_schemas, reading_schema, schema_bytes

log = logging.getLogger(__name__)

STATEMENT_TIMEOUT_MS = 5000


def read_pg_index_sizes(url: str, visible: Visible) -> list[IndexSize]:
    """The size of every index in the database at `url` that `visible` accepts. An index that cannot be read is left
    out, and logged; a database that cannot be reached fails the scrape's index families (EngineError)."""
    db = PgConnection(url, settings={"statement_timeout": str(STATEMENT_TIMEOUT_MS)})
    try:
        sizes = []
        for schema in index_schemas(db):
            # The index's name; of a name too long for a schema (past 57 characters), its start and digest.
            name = schema.removeprefix(INDEX_SCHEMA_PREFIX)
            if not visible(name):
                continue
            try:
                sizes.append(_index_size(db, name, schema))
            except EngineError:
                log.warning("metrics: cannot read index %s", name)
        return sizes
    finally:
        db.close()


def _index_size(db: PgConnection, name: str, schema: str) -> IndexSize:
    with reading_schema(db, schema):
        counts = index_counts(db)
        mirror_files = count_live_files(db)
        size = schema_bytes(db)
    return IndexSize(
        name=name,
        files=counts.files,
        chunks=counts.chunks,
        pending_vectors=counts.pending_vectors,
        rebuilding=counts.rebuilding,
        mirror_files=mirror_files,
        database_bytes={"schema": size},
    )
