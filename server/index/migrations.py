"""Numbered forward migrations; `PRAGMA user_version` records how many have run."""

from __future__ import annotations

from collections.abc import Callable

import apsw

from server.index.transaction import writing

FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"


def m001_initial(db: apsw.Connection) -> None:
    db.execute(
        f"""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE files(
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            hash TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            lines INTEGER NOT NULL,
            day TEXT,
            indexed_at REAL NOT NULL
        );
        CREATE TABLE chunks(
            -- AUTOINCREMENT: an id is never reused, so a vector row can never point at another chunk's text.
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            heading TEXT NOT NULL,
            context TEXT NOT NULL,
            text TEXT NOT NULL,
            hash TEXT NOT NULL,
            tokens INTEGER NOT NULL
        );
        CREATE INDEX chunks_by_file ON chunks(file_id, ordinal);
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            text, heading, content='chunks', content_rowid='id', tokenize='{FTS_TOKENIZER}'
        );
        CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
        END;
        CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, old.heading);
        END;
        CREATE TABLE embedding_cache(
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY(provider, model, hash)
        ) WITHOUT ROWID;
        """
    )


def m002_embedding_cache_rowid(db: apsw.Connection) -> None:
    """Move the embedding cache to a rowid table. In a WITHOUT ROWID table a 1.5 KB vector spills to an overflow
    page of its own, so every cached vector took a whole 4 KB page (measured 4.6 KB per row, the largest table of
    the database); a rowid table stores two per page."""
    db.execute(
        """
        CREATE TABLE embedding_cache_v2(
            id INTEGER PRIMARY KEY,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            UNIQUE(provider, model, hash)
        );
        INSERT INTO embedding_cache_v2(provider, model, hash, vector)
            SELECT provider, model, hash, vector FROM embedding_cache;
        DROP TABLE embedding_cache;
        ALTER TABLE embedding_cache_v2 RENAME TO embedding_cache;
        """
    )


def m003_embedding_cache_used_at(db: apsw.Connection) -> None:
    """When each cached vector was last written or reused, so entries nothing uses any more can be pruned."""
    db.execute(
        """
        ALTER TABLE embedding_cache ADD COLUMN used_at REAL NOT NULL DEFAULT 0;
        CREATE INDEX embedding_cache_used_at ON embedding_cache(used_at);
        """
    )


RELABEL_KEY = "relabel_files"  # meta: every file is to be chunked again once (see MemoryIndex)
RELABEL_HASH = ""  # the indexed hash of a file waiting for that (`server.index.relabel`), no file's real one


def m004_labels(db: apsw.Connection) -> None:
    """Tags and a category per chunk (`server.index.tagging`): the chunk's own columns for hits, a tag table for
    filters. Every file is marked changed, so the engine chunks it again once (front matter stops being text);
    chunks whose text did not change take their vectors from the embedding cache, not the model."""
    db.execute(
        f"""
        ALTER TABLE chunks ADD COLUMN tags TEXT NOT NULL DEFAULT '';
        ALTER TABLE chunks ADD COLUMN category TEXT NOT NULL DEFAULT '';
        CREATE INDEX chunks_by_category ON chunks(category) WHERE category != '';
        CREATE TABLE chunk_tags(
            tag TEXT NOT NULL,
            chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
            PRIMARY KEY(tag, chunk_id)
        ) WITHOUT ROWID;
        CREATE INDEX chunk_tags_by_chunk ON chunk_tags(chunk_id);
        UPDATE files SET hash = '{RELABEL_HASH}', mtime_ns = -1;
        INSERT INTO meta(key, value) SELECT '{RELABEL_KEY}', '1' WHERE EXISTS (SELECT 1 FROM files);
        """
    )


MIGRATIONS: list[Callable[[apsw.Connection], None]] = [
    m001_initial,
    m002_embedding_cache_rowid,
    m003_embedding_cache_used_at,
    m004_labels,
]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: apsw.Connection) -> int:
    """Bring the schema up to date, one transaction per migration; returns the version reached."""
    from server.index.errors import EngineError

    version = int(db.execute("PRAGMA user_version").fetchall()[0][0])  # type: ignore[arg-type]
    if version > SCHEMA_VERSION:
        raise EngineError(
            f"the index was written by a newer version (schema {version}, this one knows {SCHEMA_VERSION})"
        )
    for number in range(version, SCHEMA_VERSION):
        with writing(db):
            MIGRATIONS[number](db)
            db.execute(f"PRAGMA user_version = {number + 1}")
    return SCHEMA_VERSION
