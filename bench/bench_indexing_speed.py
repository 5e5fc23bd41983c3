"""Benchmark 2: indexing throughput against raw `model.encode` on the very same chunk texts, same run.

The ratio (our chunks per second / raw chunks per second) shows what chunking, hashing, SQLite, FTS5 and
sqlite-vec writes cost on top of the model. Target: >= 0.9.
"""

from __future__ import annotations

import json
import shutil
import sys

from common import CACHE, SCIFACT, report, save_json, table, timer

from server.index.chunker import chunk_markdown
from server.index.embeddings.local import ENCODE_BATCH, LocalEmbedder
from server.index.engine import MemoryIndex

DOCS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
ROUNDS = 2


def main() -> None:
    folder = CACHE / "speed-md"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "memory").mkdir(parents=True)
    with (SCIFACT / "corpus.jsonl").open() as handle:
        for number, line in zip(range(DOCS), handle, strict=False):
            doc = json.loads(line)
            (folder / "memory" / f"{number:05}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n", "utf-8")

    embedder = LocalEmbedder()
    model = embedder._load()
    texts = []
    for path in sorted((folder / "memory").iterdir()):
        texts.extend(c.embed_text for c in chunk_markdown(path.read_text("utf-8"), embedder.tokenizer))
    unique = list(dict.fromkeys(texts))
    model.encode(unique[:64], batch_size=ENCODE_BATCH)  # warm up threads and allocator

    raw_times, ours_times, embedded = [], [], 0
    for round_number in range(ROUNDS):
        with timer() as t:
            model.encode(unique, batch_size=ENCODE_BATCH, normalize_embeddings=True, convert_to_numpy=True)
        raw_times.append(t[0])
        data = CACHE / f"speed-data-{round_number}"
        shutil.rmtree(data, ignore_errors=True)
        index = MemoryIndex.open(data, "speed", embedder, create=True)
        with timer() as t:
            result = index.index(folder)
        ours_times.append(t[0])
        embedded = result.chunks_embedded
        index.close()
        shutil.rmtree(data, ignore_errors=True)

    raw, ours = min(raw_times), min(ours_times)
    ratio = (embedded / ours) / (len(unique) / raw)
    rows = [
        ["raw model.encode", len(unique), raw, len(unique) / raw, 1.0],
        ["memory-server index", embedded, ours, embedded / ours, ratio],
    ]
    body = (
        f"{DOCS} SciFact abstracts as markdown files, {len(unique)} distinct chunks, batch size {ENCODE_BATCH}, "
        f"best of {ROUNDS} alternating rounds (each index run starts from an empty database).\n\n"
        + table(["path", "chunks", "seconds", "chunks/s", "ratio"], rows)
    )
    report("indexing_speed", "Indexing speed against raw model.encode", body)
    save_json("indexing_speed", {"raw_s": raw_times, "ours_s": ours_times, "chunks": len(unique), "ratio": ratio})


if __name__ == "__main__":
    main()
