#!/usr/bin/env python3
"""What the embedding cache's rules (server/index/cache_rules.py) cost on each backend, on the real schemas: the
claim of the day's prune (run after every indexing run), the count before a cap, a prune and a cap. N cached
vectors (default 200,000): half the live model's vectors of current chunks, half another model's.

    .venv/bin/python bench/bench_cache_rules.py [N]
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import postgres_url, report, save_json, table

from server.index.cache_rules import CACHE_KEEP_DAYS, cap_sql, claim_prune_sql, count_sql, prune_sql
from server.index.store import Store
from server.mirror.queries import Query
from server.postgres.connection import PgConnection
from server.postgres.migrations import migrate

LIVE = ("local", "m")
BLOB = np.zeros(384, np.float32).tobytes()
DAY = 86400.0
SQLITE_SERIES = "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < ? - 1) SELECT n FROM s"
PG_SERIES = "SELECT generate_series(0, ? - 1) AS n"


def fill(db: Any, n: int, series: str, file_sql: str, terms: bool) -> None:
    """n/2 chunks whose hashes the live model's cached vectors cover, and n cached vectors in all (the other half
    another model's), each used a second before the last. `series`: the numbers 0 .. ?-1 as rows of `n`."""
    now = time.time()
    extra, value = (", terms", ", 1") if terms else ("", "")
    with db:
        db.execute(file_sql)
        db.execute(
            f"INSERT INTO chunks(file_id, ordinal, start_line, end_line, heading, context, text, hash, tokens{extra})"
            f" SELECT 1, n, 1, 1, '', '', '', 'h' || n, 1{value} FROM ({series}) AS g",
            (n // 2,),
        )
        db.execute(
            "INSERT INTO embedding_cache(provider, model, hash, vector, used_at)"
            f" SELECT 'local', CASE WHEN n < ? THEN 'm' ELSE 'other' END, 'h' || n, ?, ? - n FROM ({series}) AS g",
            (n // 2, BLOB, now, n),
        )


def steps(db: Any, meta: str, n: int) -> list[tuple[str, float, int]]:
    """The steps in order, each on the cache as the one before left it: (step, ms, rows) each."""
    now = time.time()

    def claim() -> int:
        with db:
            return len(db.execute(*claim_prune_sql(meta, now)).fetchall())

    def changed(query: Query) -> Callable[[], int]:
        def run() -> int:
            with db:
                db.execute(*query)
                return int(db.changes())

        return run

    out = []
    for name, run in (
        ("claim the day's prune (due)", claim),
        ("claim again (not due: every other run)", claim),
        ("count the cache (before a cap)", lambda: int(db.execute(*count_sql()).fetchall()[0][0])),
        ("prune (all unused for a month)", changed(prune_sql(LIVE, now + (CACHE_KEEP_DAYS + 1) * DAY))),
        ("cap to a quarter of N", changed(cap_sql(LIVE, n // 2 - n // 4))),
    ):
        started = time.perf_counter()
        rows = run()
        out.append((name, 1000 * (time.perf_counter() - started), rows))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "index.sqlite3")
        db = store.connection()
        fill(db, n, SQLITE_SERIES, "INSERT INTO files VALUES(1, 'p', 'memory', 'h', 0, 0, 0, NULL, 0)", terms=False)
        sqlite = steps(db, "meta", n)
        store.close()
    with postgres_url() as url:
        pg = PgConnection(url, "bench_cache")
        migrate(pg, "bench_cache")
        fill(pg, n, PG_SERIES, "INSERT INTO indexed_files VALUES(1, 'p', 'memory', 'h', 0, 0, NULL, 0)", terms=True)
        pg.execute("ANALYZE")
        postgres = steps(pg, "search_meta", n)
        pg.close()
    rows = [[a[0], round(a[1], 2), round(b[1], 2), a[2], b[2]] for a, b in zip(sqlite, postgres, strict=True)]
    body = (
        f"{n} cached vectors: half the live model's, of {n // 2} current chunks; half another model's. One run of "
        "each step, in order, on the real schemas (the prune leaves the live half, the cap takes it to N/4).\n\n"
        + table(["step", "SQLite ms", "PostgreSQL ms", "SQLite rows", "PostgreSQL rows"], rows)
    )
    report("cache_rules", "The embedding cache's prune and cap: what each step costs", body)
    save_json("cache_rules", {"n": n, "sqlite": sqlite, "postgres": postgres})


if __name__ == "__main__":
    main()
