"""Benchmark: the cost of the version history (`server.mirror.history`) in the mirror's `state.sqlite3`.

Three ways memory files change, each written VERSIONS times through `Mirror.write` (the path every tool write,
push, merge and restore takes):

- daily log: an entry of about 200 bytes appended each time (the file grows to about VERSIONS x 200 bytes);
- MEMORY.md: a 6 kB file with one line rewritten each time;
- new notes: a new 1 kB note each time.

For each: bytes per version (the contents' compressed bytes plus the history row, as stored, and the growth of
`state.sqlite3` on disk after a checkpoint, divided by the versions), and the write latency (p50, p95) with the
history against without it: the same writes into a second mirror whose history rows are not written, alternating
between the two so both see the same machine. Without history the contents are still stored (they were the merge
bases of sync before the history existed); the history adds a row per version and keeps contents as long as the
retention keeps their versions.

    .venv/bin/python bench/bench_history.py [--quick]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from common import percentile, report, save_json, table

import server.mirror.mirror as mirror_module
from server.mirror.mirror import Mirror
from server.mirror.state import open_state

QUICK = "--quick" in sys.argv
VERSIONS = 100 if QUICK else 500
WORDS = "deploy staging kestrel haproxy sqlite wal backup restore merge laptop proxy index chunk vector".split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def daily_log(rng: random.Random) -> Iterator[tuple[str, str]]:
    text = "# 2026-11-25\n"
    for n in range(VERSIONS):
        text += f"\n## {9 + n // 60:02d}:{n % 60:02d} — note {n}\n{sentence(rng, 25)}\n"
        yield "memory/2026-11-25.md", text


def memory_md(rng: random.Random) -> Iterator[tuple[str, str]]:
    lines = ["# Project memory", ""] + [f"- {sentence(rng, 12)}" for _ in range(70)]
    for _ in range(VERSIONS):
        lines[rng.randrange(2, len(lines))] = f"- {sentence(rng, 12)}"
        yield "MEMORY.md", "\n".join(lines) + "\n"


def new_notes(rng: random.Random) -> Iterator[tuple[str, str]]:
    for n in range(VERSIONS):
        yield f"memory/notes/note-{n:04d}.md", f"# Note {n}\n\n" + " ".join(sentence(rng, 15) for _ in range(8)) + "\n"


@contextmanager
def without_history() -> Iterator[None]:
    """Mirror writes skip the history row (as before the history existed); contents are still stored."""
    original = mirror_module.record_change
    mirror_module.record_change = lambda db, version: None
    try:
        yield
    finally:
        mirror_module.record_change = original


def stored(folder: Path) -> tuple[int, int, int]:
    """History rows, their contents' compressed bytes plus the rows' bytes, and the state file's size on disk."""
    db = open_state(folder)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        rows, row_bytes = db.execute(
            "SELECT count(*), coalesce(sum(length(path) + length(coalesce(hash, '')) + length(change)"
            " + length(updated_by) + length(updated_at) + 16), 0) FROM history"
        ).fetchall()[0]
        blobs = db.execute("SELECT coalesce(sum(length(data)), 0) FROM versions").fetchall()[0][0]
    finally:
        db.close()
    return int(rows), int(blobs) + int(row_bytes), (folder / "state.sqlite3").stat().st_size  # type: ignore[arg-type]


def run(name: str, changes: Callable[[random.Random], Iterator[tuple[str, str]]], root: Path) -> dict[str, object]:
    with_dir, without_dir = root / f"{name}-with", root / f"{name}-without"
    kept, plain = Mirror(with_dir), Mirror(without_dir)
    _, _, empty = stored(with_dir)
    timings: dict[str, list[float]] = {"with": [], "without": []}
    raw = 0
    for n, (path, text) in enumerate(changes(random.Random(7))):
        raw += len(text.encode())
        order = [("with", kept), ("without", plain)] if n % 2 == 0 else [("without", plain), ("with", kept)]
        for label, mirror in order:
            started = time.perf_counter()
            if label == "with":
                mirror.write(path, text, caller="bench")
            else:
                with without_history():
                    mirror.write(path, text, caller="bench")
            timings[label].append(time.perf_counter() - started)
    kept.close()
    plain.close()
    rows, logical, on_disk = stored(with_dir)
    _, logical_without, on_disk_without = stored(without_dir)
    return {
        "changes": name,
        "versions": rows,
        "raw_bytes_per_version": raw / VERSIONS,
        "stored_bytes_per_version": logical / rows,
        "disk_bytes_per_version": (on_disk - empty) / rows,
        "disk_bytes_per_version_without": (on_disk_without - empty) / VERSIONS,
        "write_ms_p50_with": percentile(timings["with"], 50) * 1000,
        "write_ms_p50_without": percentile(timings["without"], 50) * 1000,
        "write_ms_p95_with": percentile(timings["with"], 95) * 1000,
        "write_ms_p95_without": percentile(timings["without"], 95) * 1000,
        "logical_without": logical_without,
    }


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-history-") as folder:
        for name, changes in (("daily log", daily_log), ("MEMORY.md", memory_md), ("new notes", new_notes)):
            results.append(run(name, changes, Path(folder)))
    headers = [
        "changes", "versions", "file bytes", "stored B/version", "disk B/version", "disk B/version w/o history",
        "write p50 ms", "w/o history", "write p95 ms", "w/o history",
    ]  # fmt: skip
    rows = [
        [r["changes"], r["versions"], r["raw_bytes_per_version"], r["stored_bytes_per_version"],
         r["disk_bytes_per_version"], r["disk_bytes_per_version_without"], r["write_ms_p50_with"],
         r["write_ms_p50_without"], r["write_ms_p95_with"], r["write_ms_p95_without"]]
        for r in results
    ]  # fmt: skip
    body = (
        f"{VERSIONS} versions per kind of change through `Mirror.write` (WAL, synchronous=FULL: one fsync of the\n"
        'file, its folder and the database per write). "file bytes": the file\'s average size when written;\n'
        '"stored": zlib-compressed contents plus the history row; "disk": growth of state.sqlite3 after a checkpoint.\n'
        "Without history the contents are stored too (merge bases); only the row and its index entries differ.\n\n"
        + table(headers, rows)
    )
    report("history", "Version history: bytes per version and write latency", body)
    save_json("history", results)


if __name__ == "__main__":
    main()
