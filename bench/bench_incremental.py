"""Benchmark 3: incremental indexing.

(a) One edited line in a ~50-chunk file: how many chunks are re-embedded, for an edit in the middle and over
every line of the file. (b) A tree of 1,000 daily logs: re-indexing it unchanged embeds nothing and takes < 2 s.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
from collections import Counter

from common import CACHE, report, save_json, table, timer

from server.index.embeddings.local import LocalEmbedder
from server.index.engine import MemoryIndex

WORDS = (
    "the deploy pipeline runs migrations before web pods while the worker drains its queue and we watch "
    "error rates latency dashboards retries idempotency keys redis postgres invoices refunds webhooks"
).split()


def long_file(rnd: random.Random, sections: int = 9) -> list[str]:
    lines = ["# Project notes"]
    for section in range(sections):
        lines += ["", f"## Topic {section}"]
        for _ in range(12):
            lines.append("")
            if rnd.random() < 0.3:
                lines += [f"- {' '.join(rnd.choices(WORDS, k=rnd.randint(5, 25)))}." for _ in range(3)]
            else:
                lines += [" ".join(rnd.choices(WORDS, k=rnd.randint(10, 40))).capitalize() + "." for _ in range(2)]
    return lines


def edits(line: str) -> dict[str, str]:
    words = line.split(" ")
    return {
        "append a sentence": line + " One more remark about it.",
        "change a middle word": " ".join([*words[: len(words) // 2], "changed", *words[len(words) // 2 + 1 :]]),
        "rewrite the opening words": line.replace(" ", " really ", 1),
    }


def single_file(embedder: LocalEmbedder) -> tuple[str, dict[str, object]]:
    rnd = random.Random(3)
    folder = CACHE / "incremental-file"
    data = CACHE / "incremental-file-data"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    (folder / "memory").mkdir(parents=True)
    lines = long_file(rnd)
    path = folder / "memory" / "notes.md"
    path.write_text("\n".join(lines) + "\n")
    index = MemoryIndex.open(data, "inc", embedder, create=True)
    chunks = index.index(folder).chunks_written

    def reembedded(new_lines: list[str]) -> int:
        path.write_text("\n".join(new_lines) + "\n")
        count = index.index(folder).chunks_embedded
        path.write_text("\n".join(lines) + "\n")
        index.index(folder)  # back to the original: free, from the embedding cache
        return count

    editable = [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")]
    middle = editable[len(editable) // 2]
    middle_counts = {
        kind: reembedded([*lines[:middle], new, *lines[middle + 1 :]]) for kind, new in edits(lines[middle]).items()
    }
    distribution: dict[str, Counter[int]] = {}
    for number in editable:
        for kind, new in edits(lines[number]).items():
            distribution.setdefault(kind, Counter())[reembedded([*lines[:number], new, *lines[number + 1 :]])] += 1
    index.close()
    rows = []
    for kind, counts in distribution.items():
        total = sum(counts.values())
        rows.append(
            [
                kind,
                middle_counts[kind],
                total,
                f"{100 * counts[1] / total:.1f}%",
                f"{100 * counts[2] / total:.1f}%",
                f"{100 * sum(v for k, v in counts.items() if k > 2) / total:.1f}%",
                max(counts),
            ]
        )
    body = f"### (a) one edited line in a {chunks}-chunk file ({len(lines)} lines)\n\n" + table(
        ["edit", "middle line", "edits tried", "1 chunk", "2 chunks", "3+ chunks", "max"], rows
    )
    return body, {
        "chunks": chunks,
        "middle": middle_counts,
        "distribution": {k: dict(v) for k, v in distribution.items()},
    }


def tree(embedder: LocalEmbedder) -> tuple[str, dict[str, object]]:
    rnd = random.Random(5)
    folder = CACHE / "incremental-tree"
    data = CACHE / "incremental-tree-data"
    if not (folder / "memory").is_dir():
        (folder / "memory").mkdir(parents=True)
        day = dt.date(2023, 1, 1)
        for _ in range(1000):
            entries = []
            for _ in range(rnd.randint(1, 3)):
                topic = " ".join(rnd.choices(WORDS, k=3))
                bullets = "\n".join(f"- {' '.join(rnd.choices(WORDS, k=rnd.randint(6, 18)))}." for _ in range(3))
                entries.append(f"## {rnd.randint(8, 18):02}:{rnd.randint(0, 59):02} — {topic}\n{bullets}")
            (folder / "memory" / f"{day.isoformat()}.md").write_text(
                f"# {day.isoformat()}\n\n" + "\n\n".join(entries) + "\n"
            )
            day += dt.timedelta(days=1)
    index = MemoryIndex.open(data, "tree", embedder, create=True)
    with timer() as first:
        initial = index.index(folder)
    with timer() as second:
        unchanged = index.index(folder)
    for path in (folder / "memory").iterdir():
        os.utime(path)  # new mtimes, same bytes: every file is hashed again
    with timer() as third:
        touched = index.index(folder)
    index.close()
    rows = [
        [
            "initial index (or resumed from cache)",
            initial.files_seen,
            initial.files_indexed,
            initial.chunks_embedded,
            first[0],
        ],
        [
            "re-index, nothing changed",
            unchanged.files_seen,
            unchanged.files_indexed,
            unchanged.chunks_embedded,
            second[0],
        ],
        [
            "re-index after touching every file",
            touched.files_seen,
            touched.files_indexed,
            touched.chunks_embedded,
            third[0],
        ],
    ]
    body = "### (b) a tree of 1,000 daily logs\n\n" + table(["run", "files", "re-indexed", "embedded", "seconds"], rows)
    return body, {"unchanged_s": second[0], "touched_s": third[0], "unchanged_embedded": unchanged.chunks_embedded}


def main() -> None:
    embedder = LocalEmbedder()
    a, a_json = single_file(embedder)
    b, b_json = tree(embedder)
    report("incremental", "Incremental indexing", a + "\n\n" + b)
    save_json("incremental", {"single_file": a_json, "tree": b_json})


if __name__ == "__main__":
    main()
