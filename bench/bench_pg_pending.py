"""bench_pending.py's question on PostgreSQL: what an indexing run of one file (a sync push) pays that grows with the
index, at 100k and 1M chunks, against the statements it ran before, in the same run.

Before, every run read every live file's row and every indexed file's row (to pick the few it was given) and then
counted the chunks without a vector over the whole index; now it reads the rows of its paths and counts past the
mark the last complete count left (`server.index.stats.complete_through`, on PostgreSQL as on SQLite).

The index is the product's schema (opened and migrated by `PgSearchIndex`, one file indexed through it), grown by
SQL to N chunks: ten a file, each with the same unit vector (none of these costs depends on the vectors; the HNSW
index is dropped so the load takes a minute, and nothing here searches). Starts a throwaway PostgreSQL (pgserver)
unless MEMORY_DATABASE_URL names one (a scratch database!). Usage: `python bench/bench_pg_pending.py [sizes...]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

from bench_pending import REPEATS, RandomModel, timed
from common import median, postgres_url, report, save_json, table

from server.index.engine_settings import EngineSettings
from server.index.stats import COMPLETE_THROUGH
from server.postgres import search_queries as sq
from server.postgres.files import PgFileStore
from server.postgres.search import PgSearchIndex
from server.postgres.search_vectors import put_meta, read_space

SIZES = [100_000, 1_000_000]
CHUNKS_PER_FILE = 10
NOTE = "memory/2026-11-26.md"
OLD_COUNT = "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM {table} v WHERE v.chunk_id = c.id)"
OLD_READS = ("SELECT path, hash FROM files WHERE hash IS NOT NULL", "SELECT id, path, hash FROM indexed_files")


def grow(index: PgSearchIndex, size: int) -> float:
    """The index grown by SQL to `size` chunks (files, indexed files, chunks, vectors); the seconds it took."""
    db = index._writer
    space = read_space(db)
    assert space is not None
    vector = "[" + ",".join(["0.05103103630798288"] * 384) + "]"  # 1/sqrt(384): a unit vector
    files = size // CHUNKS_PER_FILE
    started = time.perf_counter()
    with db:
        hnsw = "SELECT indexname FROM pg_indexes WHERE tablename = ? AND indexdef LIKE '%USING hnsw%'"
        for (name,) in db.execute(hnsw, (space.table,)).fetchall():
            db.execute(f'DROP INDEX "{name}"')
        db.execute(
            "INSERT INTO files(path, hash, size, lines, revision, updated_by, updated_at, content)"
            " SELECT 'bulk/' || lpad(g::text, 7, '0') || '.md', md5(g::text), 10, 10, 1, 'bench',"
            " '2026-11-26T00:00:00Z', 'x'::bytea FROM generate_series(1, ?) g",
            (files,),
        )
        db.execute(
            "INSERT INTO indexed_files(path, source, hash, size, lines, day, indexed_at)"
            " SELECT 'bulk/' || lpad(g::text, 7, '0') || '.md', 'memory', md5(g::text), 10, 10, NULL, 0"
            " FROM generate_series(1, ?) g",
            (files,),
        )
        db.execute(
            "INSERT INTO chunks(file_id, ordinal, start_line, end_line, heading, context, text, hash, tokens, terms)"
            " SELECT f.id, o, o + 1, o + 1, '', '', 'bulk text ' || o, md5(f.path || o), 3, 3"
            " FROM indexed_files f CROSS JOIN generate_series(0, ?) o WHERE f.path LIKE 'bulk/%'",
            (CHUNKS_PER_FILE - 1,),
        )
        db.execute(
            f"INSERT INTO {space.table}(chunk_id, embedding, source, path, day) SELECT c.id, ?::vector, 'memory',"
            " f.path, '' FROM chunks c JOIN indexed_files f ON f.id = c.file_id WHERE f.path LIKE 'bulk/%'",
            (vector,),
        )
    db.execute("ANALYZE")
    return time.perf_counter() - started


def measure(url: str, size: int, folder: Path) -> dict[str, float | int]:
    schema = f"pending{size}"
    index = PgSearchIndex(url, schema, RandomModel(), EngineSettings())  # type: ignore[arg-type]
    clock = lambda: dt.datetime(2026, 11, 26, tzinfo=dt.UTC)  # noqa: E731
    store = PgFileStore(url, schema, folder / schema, clock=clock)
    try:
        store.write(NOTE, "# Deploy\n\nThe canary runs an hour.\n", caller="bench")
        index.index()
        row: dict[str, float | int] = {"chunks": size, "load_s": round(grow(index, size), 1)}
        db = index._writer
        space = read_space(db)
        assert space is not None
        with db:
            put_meta(db, COMPLETE_THROUGH, None)  # as an index from before the mark
        row["count_old_ms"] = 1000 * timed(lambda: db.execute(OLD_COUNT.format(table=space.table)).fetchall())
        row["reads_old_ms"] = sum(1000 * timed(lambda sql=sql: db.execute(sql).fetchall()) for sql in OLD_READS)
        row["status_ms"] = 1000 * timed(index.status)
        seconds = []
        for take in range(REPEATS + 1):
            store.write(NOTE, f"# Deploy\n\nThe canary now runs an hour, take {take}.\n", caller="bench")
            started = time.perf_counter()
            report_ = index.index(paths=[NOTE])
            seconds.append(time.perf_counter() - started)
            assert report_.files_indexed == 1 and report_.chunks_pending == 0, report_
        row["first_file_ms"], row["file_ms"] = 1000 * seconds[0], 1000 * median(seconds[1:])
        row["count_ms"] = 1000 * timed(lambda: index.pending_count())
        row["status_marked_ms"] = 1000 * timed(index.status)
        old_counts = (
            "SELECT f.source, count(DISTINCT f.id), count(c.id) FROM indexed_files f LEFT JOIN chunks c"
            " ON c.file_id = f.id GROUP BY f.source"
        )
        row["counts_old_ms"] = 1000 * timed(lambda: db.execute(old_counts).fetchall())
        row["counts_ms"] = 1000 * timed(lambda: db.execute(*sq.counts_by_source()).fetchall())
        return row
    finally:
        with index._writer as db:
            db.execute(f'DROP SCHEMA IF EXISTS "{index.schema}" CASCADE')
        index.close()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=SIZES)
    args = parser.parse_args()
    rows = []
    with postgres_url() as url, tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            print(f"{size:,} chunks", flush=True)
            rows.append(measure(url, size, Path(folder)))
            print(f"  {rows[-1]}", flush=True)
    body = table(
        ["chunks", "one file indexed, now (first run: no mark yet), ms",
         "before, its statements that grow: count + every file's rows, ms", "pending count past the mark, ms",
         "memory_status, no mark / marked, ms", "files and chunks per source, before / now, ms"],
        [[f"{r['chunks']:,}", f"{r['file_ms']:,.1f} ({r['first_file_ms']:,.0f})",
          f"{r['count_old_ms']:,.0f} + {r['reads_old_ms']:,.0f}", f"{r['count_ms']:,.2f}",
          f"{r['status_ms']:,.0f} / {r['status_marked_ms']:,.0f}", f"{r['counts_old_ms']:,.0f} / {r['counts_ms']:,.0f}"]
         for r in rows],
    )  # fmt: skip
    report("pg_pending", "One file indexed on PostgreSQL against index size", body)
    save_json("pg_pending", rows)


if __name__ == "__main__":
    main()
