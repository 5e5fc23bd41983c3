"""The per-index metrics with PostgreSQL (`MEMORY_DATABASE_URL`): every index schema in the database, opened by this
server or not, counted at scrape time as `memory_status` counts it (`server.postgres.search_status`). Every replica
reports the same numbers: they are the database's, shared by all.

A schema is labelled with its index's name, found among the names the shared callers are granted (`channel.callers`)
through `schema_of`, which makes the schema from the name: a name past 57 characters is not in its schema whole. So
an index is shown, under its real name, to every caller granted it; one nobody is granted, only to the loopback
listener, under the schema's name without its prefix (for a long name, its start and a digest).

One connection a scrape, closed after it (no pool kept for a scraper that may never come), each statement bounded by
STATEMENT_TIMEOUT_MS; each index is read in one read-only snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from server.callers.config import CallersFileError
from server.errors import EngineError
from server.mirror.state import count_live_files
from server.observe.metrics import IndexSize, Visible
from server.postgres.callers import read_shared_callers
from server.postgres.channel_schema import SCHEMA as CHANNEL_SCHEMA
from server.postgres.connection import INDEX_SCHEMA_PREFIX, PgConnection, schema_of
from server.postgres.search_status import index_counts, index_schemas, reading_schema, schema_bytes

log = logging.getLogger(__name__)

STATEMENT_TIMEOUT_MS = 5000


def read_pg_index_sizes(url: str, visible: Visible) -> list[IndexSize]:
    """The size of every index in the database at `url` that `visible` accepts. An index that cannot be read is left
    out, and logged; a database that cannot be reached fails the scrape's index families (EngineError)."""
    db = PgConnection(url, settings={"statement_timeout": str(STATEMENT_TIMEOUT_MS)})
    try:
        schemas = index_schemas(db)
        names = index_names(schemas, granted_indexes(db))
        sizes = []
        for schema in schemas:
            name = names[schema]
            if not visible(name):
                continue
            try:
                sizes.append(_index_size(db, name, schema))
            except EngineError:
                log.warning("metrics: cannot read index %s", name)
        return sizes
    finally:
        db.close()


def index_names(schemas: Iterable[str], known: Iterable[str]) -> dict[str, str]:
    """Each index schema's label: the known index name `schema_of` makes it from, else the schema without its
    prefix (the name itself up to 57 characters; of a longer one, its start and a digest)."""
    by_schema = {schema_of(name): name for name in known}
    return {schema: by_schema.get(schema, schema.removeprefix(INDEX_SCHEMA_PREFIX)) for schema in schemas}


def granted_indexes(db: PgConnection) -> set[str]:
    """Every index name the shared callers are granted (none before any replica created the channel's tables)."""
    if db.execute("SELECT to_regclass(?)", (f"{CHANNEL_SCHEMA}.callers",)).fetchall()[0][0] is None:
        return set()
    try:
        with reading_schema(db, CHANNEL_SCHEMA):
            config, _ = read_shared_callers(db)
    except CallersFileError as exc:  # damaged by hand: the replicas keep their last good table; labels fall back
        log.warning("metrics: cannot read the callers for index names: %s", exc)
        return set()
    return {index for entry in config.callers for index in entry.grants}


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
