"""Benchmark 4: search latency at 1k, 10k and 100k chunks, and database size per 1,000 chunks.

The large indexes are filled with real SciFact sentences and random unit vectors (building them with the
model would take hours); the query path is the real one: the engine embeds each query with the local model
and runs hybrid search. Query embedding is reported apart from the rest of the search.
"""

from __future__ import annotations

import json
import random
import sys
import time

import numpy as np
from common import CACHE, RESULTS, SCIFACT, insert_file, median, percentile, report, save_json, table

from server.index.embeddings.chain import as_chain
from server.index.embeddings.local import LocalEmbedder
from server.index.engine import MemoryIndex
from server.index.search import build_options
from server.index.vectors import live_space

SIZES = [1_000, 10_000, 100_000]
CHUNKS_PER_FILE = 10


def sentences() -> list[str]:
    out = []
    with (SCIFACT / "corpus.jsonl").open() as handle:
        for line in handle:
            out.extend(s.strip() + "." for s in json.loads(line)["text"].split(". ") if len(s) > 40)
    return out


def build(size: int, embedder: LocalEmbedder, pool: list[str]) -> MemoryIndex:
    data = CACHE / f"latency-v3-{size}"
    index = MemoryIndex.open(data, "latency", embedder, create=True)
    db = index.store.connection()
    have = db.execute("SELECT count(*) FROM chunks").fetchall()[0][0]
    if have == size:
        return index
    rnd = random.Random(size)
    generator = np.random.default_rng(size)
    table_name = live_space(index.store).table  # type: ignore[union-attr]
    for start in range(0, size, 5_000):
        with db:
            for file_number in range(start // CHUNKS_PER_FILE, min(start + 5_000, size) // CHUNKS_PER_FILE):
                path = f"memory/{file_number:06}.md"
                file_id = insert_file(db, path, f"h{file_number}")
                vectors = generator.standard_normal((CHUNKS_PER_FILE, 384)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                for ordinal in range(CHUNKS_PER_FILE):
                    text = " ".join(rnd.choices(pool, k=rnd.randint(2, 6)))
                    db.execute(
                        "INSERT INTO chunks(file_id, ordinal, start_line, end_line, heading, context, text, hash,"
                        " tokens) VALUES(?, ?, ?, ?, 'Heading', '', ?, ?, 100)",
                        (file_id, ordinal, ordinal * 5 + 1, ordinal * 5 + 4, text, f"{file_number}-{ordinal}"),
                    )
                    chunk_id = db.last_insert_rowid()
                    blob = vectors[ordinal].tobytes()
                    db.execute(
                        f"INSERT INTO {table_name}(chunk_id, embedding, source, path, day)"
                        " VALUES(?, ?, 'memory', ?, '')",
                        (chunk_id, blob, path),
                    )
                    # Real indexing keeps every vector in the embedding cache too; search reads it from there.
                    db.execute(
                        "INSERT INTO embedding_cache(provider, model, hash, vector) VALUES(?, ?, ?, ?)",
                        (embedder.provider, embedder.model, f"{file_number}-{ordinal}", blob),
                    )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return index


class Precomputed:
    """The local embedder with the benchmark's query vectors computed beforehand, so a search call does no
    embedding and its time is the search alone."""

    def __init__(self, embedder: LocalEmbedder, vectors: dict[str, np.ndarray]) -> None:
        self.provider, self.model, self.dimensions = embedder.provider, embedder.model, embedder.dimensions
        self.max_tokens, self.tokenizer = embedder.max_tokens, embedder.tokenizer
        self.vectors = vectors

    def embed(self, texts: list[str], *, kind: str = "document") -> np.ndarray:
        return np.concatenate([self.vectors[t] for t in texts])


def main() -> None:
    embedder = LocalEmbedder()
    pool = sentences()
    with (SCIFACT / "queries.jsonl").open() as handle:
        queries = [json.loads(line)["text"] for line in handle]
    rows, out = [], {}
    for size in [int(s) for s in sys.argv[1:]] or SIZES:  # parsed here: other benches import this module
        index = build(size, embedder, pool)
        for query in queries[:20]:  # warm the page cache and the model
            index.search(query)
        search_ms, embed_ms, keyword_ms, total_ms = [], [], [], []
        options = build_options(limit=8)
        keyword_only = build_options(limit=8, mode="keyword")
        vectors = {}
        for query in queries:  # the query embedding alone, as the search call would do it
            started = time.perf_counter()
            vectors[query] = embedder.embed([query], kind="query")
            embed_ms.append((time.perf_counter() - started) * 1000)
        for query in queries:
            started = time.perf_counter()
            result = index.search(query, options)
            total_ms.append((time.perf_counter() - started) * 1000)
            assert result.mode == "hybrid"
            keyword_ms.append(index.search(query, keyword_only).search_ms)
        # The same searches with the query vector already known: everything but the embedding.
        index.providers = as_chain(Precomputed(embedder, vectors))  # type: ignore[arg-type]
        for query in queries:
            started = time.perf_counter()
            result = index.search(query, options)
            search_ms.append((time.perf_counter() - started) * 1000)
            assert result.mode == "hybrid"
        index.providers = as_chain(embedder)
        size_bytes = index.store.size_bytes()
        index.close()
        per_thousand = size_bytes / (size / 1000) / 1e6
        rows.append(
            [
                f"{size:,}",
                median(search_ms),
                percentile(search_ms, 95),
                median(keyword_ms),
                median(embed_ms),
                percentile(embed_ms, 95),
                median(total_ms),
                f"{per_thousand:.2f} MB",
            ]
        )
        out[size] = {
            "search_ms": search_ms,
            "embed_ms": embed_ms,
            "keyword_ms": keyword_ms,
            "total_ms": total_ms,
            "bytes": size_bytes,
        }
    body = (
        f"{len(queries)} SciFact queries, hybrid search, limit 8 (40 candidates a side), wall time of the engine's "
        "search call. 'search': the query vector is known beforehand, so this is everything but the embedding "
        "(the keyword side runs in a second thread beside the KNN). 'embed': the query embedding alone. 'total': "
        "the call with the real embedding inside (the keyword side overlaps it). 'keyword-only': the keyword mode "
        "alone. Targets: search p50 < 20 ms at 10k, < 150 ms at 100k.\n\n"
        + table(
            [
                "chunks",
                "search p50 ms",
                "search p95 ms",
                "keyword-only p50 ms",
                "embed p50 ms",
                "embed p95 ms",
                "total p50 ms",
                "DB per 1k chunks",
            ],
            rows,
        )
    )
    report("search_latency", "Search latency by index size", body)
    save_json(
        "search_latency",
        {
            str(k): {"p50": median(v["search_ms"]), "p95": percentile(v["search_ms"], 95), "bytes": v["bytes"]}
            for k, v in out.items()
        },
    )
    _plot(out)


def _plot(out: dict[int, dict[str, list[float] | int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(out)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key, label in (
        ("search_ms", "hybrid search (no embedding)"),
        ("keyword_ms", "keyword only"),
        ("embed_ms", "query embedding"),
        ("total_ms", "whole search call"),
    ):
        ax.plot(sizes, [median(out[s][key]) for s in sizes], marker="o", label=f"{label} p50")  # type: ignore[arg-type]
    ax.set_xscale("log")
    ax.set_xlabel("chunks in the index")
    ax.set_ylabel("ms")
    ax.set_title("Search latency")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "search_latency.png", dpi=120)


if __name__ == "__main__":
    main()
