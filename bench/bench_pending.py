"""The vector bookkeeping that grows with an index, from 10k to 1M chunks, each against what it replaced, in the
same run:

- the pending count (chunks still without a vector: every `memory_status`, and every indexing run, so every sync
  push of one file): a vec0 lookup per chunk (`NOT EXISTS`, before), one scan of the vec0 table's ids (`NOT IN`, a
  count with no mark yet), and a count past the mark that an indexing run leaves when it finds none (now);
- one file indexed (a push of a one-line edit), against the three statements it used to run that grow with the
  index: that count, deleting the file's old vectors with `chunk_id IN (...)` (vec0 scans its whole table for it)
  and reading every indexed file's row;
- filling a new vector table from the embedding cache (a rebuild's SQL without the model): batches paged by chunk
  id (now) against each batch read from the first id again (before: it steps over every chunk filled before it, so
  the fill grew with the square of the index).

The indexes hold random unit vectors (none of these costs depends on what the vectors are; no recall is measured
here), ten chunks a file, built once under bench/.cache/pending. Usage:
`python bench/bench_pending.py [sizes...] [--old-fill-max N]` (the old fill only up to N chunks: 212 s at 100k).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import scale_build
from common import median, report, save_json, table

from server.index import vectors
from server.index.engine import MemoryIndex
from server.index.stats import COMPLETE_THROUGH
from server.index.status import index_status
from server.index.tokens import WordPieceTokenizer
from server.index.transaction import writing

SIZES = [10_000, 30_000, 100_000, 1_000_000]
REPEATS = 3
OLD_COUNT = "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM {table} v WHERE v.chunk_id = c.id)"


class RandomModel:
    """The default model's identity (so a fill finds every vector in the embedding cache) with seeded random
    vectors for new text (an edited note), at no model cost."""

    provider, model, dimensions, max_tokens = "local", "all-MiniLM-L6-v2", 384, 256
    tokenizer = WordPieceTokenizer.default()

    def embed(self, texts: list[str], *, kind: str = "document") -> np.ndarray:
        unit = np.random.default_rng(len(texts)).standard_normal((len(texts), 384)).astype(np.float32)
        return unit / np.linalg.norm(unit, axis=1, keepdims=True)  # type: ignore[no-any-return]


def source(size: int) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(size)
    unit = rng.standard_normal((size, 384)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    return unit, [f"chunk {i} of the pending-vectors bench, a sentence of ordinary length" for i in range(size)]


def timed(run: object, repeats: int = REPEATS) -> float:
    """The median seconds of `repeats` calls of `run`."""
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        out.append(time.perf_counter() - started)
    return median(out)


def fill_from_first_id(index: MemoryIndex, space: vectors.VectorSpace) -> None:
    """The old loop: each batch read from the first chunk id again (the baseline)."""
    db = index.store.connection()
    while True:
        rows = vectors._chunks_without_vectors(db, space.table, 0, vectors.REBUILD_BATCH)
        if not rows:
            return
        found, _ = vectors.embed_missing(db, RandomModel(), {h: text for _, h, text, *_ in rows})  # type: ignore[arg-type]
        with writing(db):
            for chunk_id, h, _, src, path, day in rows:
                db.execute(
                    f"INSERT INTO {space.table}(chunk_id, embedding, source, path, day) VALUES(?, ?, ?, ?, ?)",
                    (chunk_id, found[h], src, path, day),
                )


def fill_seconds(index: MemoryIndex, fill: object) -> float:
    """Seconds to fill a new table for the same model (then dropped), every vector from the cache."""
    space = vectors.create_space(index.store, RandomModel(), "vector_next")  # type: ignore[arg-type]
    try:
        embedded = index.store.connection().execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        started = time.perf_counter()
        fill(index, space)  # type: ignore[operator]
        seconds = time.perf_counter() - started
        assert vectors.count_missing(index.store, space) == 0, "the fill left chunks without a vector"
        after = index.store.connection().execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        assert after == embedded, "the fill ran the model: the bench measures the cache's path"
        return seconds
    finally:
        vectors._drop(index.store, space, "vector_next")


def one_file_ms(index: MemoryIndex, notes: Path) -> tuple[float, float]:
    """A one-line note written and indexed by path, as a sync push does: the first run (it finds no mark, so it
    counts every chunk once, and leaves the mark) and the median of the runs after it, in ms."""
    (notes / "memory").mkdir(parents=True, exist_ok=True)
    seconds = []
    for take in range(REPEATS + 1):
        (notes / "memory" / "2026-11-26.md").write_text(f"# Deploy\n\nThe canary now runs an hour, take {take}.\n")
        started = time.perf_counter()
        report = index.index(notes, paths=["memory/2026-11-26.md"])
        seconds.append(time.perf_counter() - started)
        assert report.files_indexed == 1 and report.chunks_pending == 0, report
    (notes / "memory" / "2026-11-26.md").unlink()
    assert index.index(notes, paths=["memory/2026-11-26.md"]).files_removed == 1  # the cached index as built
    return 1000 * seconds[0], 1000 * median(seconds[1:])


def old_statements_ms(index: MemoryIndex, table: str) -> tuple[float, float, float]:
    """The statements an indexing run of one file ran before that grow with the index (each rolled back or read
    only): the count by a lookup per chunk, the vec0 delete by `IN`, and every indexed file's row."""
    db = index.store.connection()
    file_id = db.execute("SELECT max(file_id) FROM chunks").fetchall()[0][0]

    def delete_by_in() -> None:
        db.execute("BEGIN")
        try:
            db.execute(f"DELETE FROM {table} WHERE chunk_id IN (SELECT id FROM chunks WHERE file_id = ?)", (file_id,))
        finally:
            db.execute("ROLLBACK")

    count = 1000 * timed(lambda: db.execute(OLD_COUNT.format(table=table)).fetchall())
    delete = 1000 * timed(delete_by_in)
    rows = 1000 * timed(lambda: db.execute("SELECT id, path, hash, size, mtime_ns FROM files").fetchall())
    return count, delete, rows


def measure(size: int, old_fill_max: int, notes: Path) -> dict[str, float | int | None]:
    index, built = scale_build.build(size, RandomModel(), source(size), name="pending")  # type: ignore[arg-type]
    space = vectors.live_space(index.store)
    assert space is not None
    index.store.set_meta(COMPLETE_THROUGH, None)  # as an index from before the mark
    row: dict[str, float | int | None] = {"chunks": size, "build_s": round(built, 1)}
    row["count_old_ms"], row["delete_old_ms"], row["files_old_ms"] = old_statements_ms(index, space.table)
    row["count_scan_ms"] = 1000 * timed(lambda: vectors.count_missing(index.store, space))
    row["status_scan_ms"] = 1000 * timed(lambda: index_status(index))
    row["first_file_ms"], row["file_ms"] = one_file_ms(index, notes)  # leaves the mark
    row["count_ms"] = 1000 * timed(lambda: vectors.count_missing(index.store, space))
    row["status_ms"] = 1000 * timed(lambda: index_status(index))
    product = lambda idx, sp: vectors.fill_space(idx.store, sp, RandomModel())  # type: ignore[arg-type] # noqa: E731
    row["fill_s"] = fill_seconds(index, product)
    row["fill_old_s"] = fill_seconds(index, fill_from_first_id) if size <= old_fill_max else None
    index.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=SIZES)
    parser.add_argument("--old-fill-max", type=int, default=30_000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as notes:
        for size in args.sizes:
            print(f"{size:,} chunks", flush=True)
            rows.append(measure(size, args.old_fill_max, Path(notes) / str(size)))
            print(f"  {rows[-1]}", flush=True)

    def cell(value: float | int | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    counting = table(
        ["chunks", "pending count, lookup per chunk (before), ms", "one scan (no mark yet), ms",
         "past the mark (now), ms", "memory_status, no mark / marked, ms"],
        [[f"{r['chunks']:,}", cell(r["count_old_ms"]), cell(r["count_scan_ms"]), cell(r["count_ms"], 2),
          f"{cell(r['status_scan_ms'])} / {cell(r['status_ms'])}"] for r in rows],
    )  # fmt: skip
    writing_ = table(
        ["chunks", "one file indexed, now (first run: no mark yet), ms",
         "before, its statements that grow: count + vec0 delete by IN + all file rows, ms"],
        [[f"{r['chunks']:,}", f"{cell(r['file_ms'], 1)} ({cell(r['first_file_ms'])})",
          f"{cell(r['count_old_ms'])} + {cell(r['delete_old_ms'])} + {cell(r['files_old_ms'])}"] for r in rows],
    )  # fmt: skip
    filling = table(
        ["chunks", "fill from the cache: each batch from the first id (before), s", "paged by id (now), s"],
        [[f"{r['chunks']:,}", cell(r["fill_old_s"], 1), cell(r["fill_s"], 1)] for r in rows],
    )  # fmt: skip
    body = f"## Counting what waits for a vector\n\n{counting}\n\n## One file indexed (a sync push)\n\n{writing_}"
    body += f"\n\n## Filling a new vector table (a rebuild's SQL, every vector from the cache)\n\n{filling}"
    report("pending", "Vector bookkeeping against index size", body)
    save_json("pending", rows)


if __name__ == "__main__":
    main()
