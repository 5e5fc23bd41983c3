"""The 1k..1M chunk sets of the scale benchmarks, built from REAL embeddings.

The seed is the SciFact index the retrieval bench builds for the float32 model (`MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2
bench/bench_retrieval_scifact.py`): 13.6k real chunk vectors and their texts. Chunk i of a scale set is seed chunk i
when i < seed size; beyond that it is a perturbed copy that keeps the seed's structure: a mix of a seed vector and
one of its 20 nearest seed neighbours (weight 0.65..0.95 on the seed), plus a little Gaussian noise (norm ~0.25),
renormalised. Its text is its seed chunk's sentences, shuffled, with one sentence of the neighbour's text added, so
the keyword side sees the same vocabulary and term frequencies as real abstracts.

Vectors are cached as one float32 .npy under bench/.cache/scale (1M x 384 = 1.5 GB); texts are rebuilt from the
seed deterministically. Query vectors: the 300 SciFact test queries embedded once by the float32 model.
"""

from __future__ import annotations

import json
import random
import re

import apsw
import numpy as np
from bench_retrieval_scifact import data_folder
from common import CACHE, SCIFACT

from server.index.model_package import FP32

SEED_INDEX = data_folder(local=FP32.name) / "indexes" / "scifact" / "index.sqlite3"
FOLDER = CACHE / "scale"
MAX_SIZE = 1_000_000
NEIGHBOURS = 20
NOISE_NORM = 0.25
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def seed() -> tuple[np.ndarray, list[str]]:
    """The real chunk vectors and texts of the SciFact index, in chunk id order."""
    if not SEED_INDEX.exists():
        raise SystemExit(
            "run MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2 bench/bench_retrieval_scifact.py first: it builds the SciFact"
            " index this set grows from"
        )
    db = apsw.Connection(str(SEED_INDEX), flags=apsw.SQLITE_OPEN_READONLY)
    rows = db.execute(
        "SELECT c.text, e.vector FROM chunks c JOIN embedding_cache e ON e.hash = c.hash ORDER BY c.id"
    ).fetchall()
    db.close()
    texts = [str(text) for text, _ in rows]
    vectors = np.frombuffer(b"".join(blob for _, blob in rows), dtype=np.float32).reshape(len(rows), -1)  # type: ignore[misc]
    return vectors.copy(), texts


def _neighbours(vectors: np.ndarray) -> np.ndarray:
    out = np.empty((len(vectors), NEIGHBOURS), dtype=np.int64)
    for start in range(0, len(vectors), 2000):
        sims = vectors[start : start + 2000] @ vectors.T
        for row in range(len(sims)):
            sims[row, start + row] = -2.0  # not itself
        out[start : start + 2000] = np.argpartition(-sims, NEIGHBOURS, axis=1)[:, :NEIGHBOURS]
    return out


def _plan(count: int, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every chunk: its seed, its neighbour (itself for the seeds) and the weight on the seed."""
    rng = np.random.default_rng(16)
    seeds = np.concatenate([np.arange(base), rng.integers(0, base, count - base)])
    picks = rng.integers(0, NEIGHBOURS, count)
    weights = np.concatenate([np.ones(base), rng.uniform(0.65, 0.95, count - base)]).astype(np.float32)
    return seeds, picks, weights


def vectors() -> np.ndarray:
    """All MAX_SIZE vectors (memory-mapped); the first ones are the seed's own."""
    path = FOLDER / f"vectors-{MAX_SIZE}.npy"
    if path.exists():
        return np.load(path, mmap_mode="r")
    FOLDER.mkdir(parents=True, exist_ok=True)
    real, _ = seed()
    near = _neighbours(real)
    seeds, picks, weights = _plan(MAX_SIZE, len(real))
    rng = np.random.default_rng(18)
    out = np.lib.format.open_memmap(path.with_suffix(".tmp.npy"), mode="w+", dtype=np.float32, shape=(MAX_SIZE, 384))
    for start in range(0, MAX_SIZE, 50_000):
        part = slice(start, min(start + 50_000, MAX_SIZE))
        s, w = seeds[part], weights[part][:, None]
        mixed = w * real[s] + (1 - w) * real[near[s, picks[part]]]
        noise = rng.standard_normal(mixed.shape).astype(np.float32) * (NOISE_NORM / np.sqrt(384))
        noise[w[:, 0] == 1.0] = 0.0  # the seeds stay exact
        mixed += noise
        out[part] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
    out.flush()
    del out
    path.with_suffix(".tmp.npy").rename(path)
    return np.load(path, mmap_mode="r")


def texts(count: int) -> list[str]:
    """The text of each of the first `count` chunks."""
    real_vectors, real = seed()
    near = _neighbours(real_vectors) if count > len(real) else None
    seeds, picks, _ = _plan(max(count, len(real)), len(real))
    rnd = random.Random(16)
    out = real[:count]
    for i in range(len(real), count):
        own = _SENTENCE.split(real[seeds[i]])
        other = _SENTENCE.split(real[near[seeds[i], picks[i]]])  # type: ignore[index]
        rnd.shuffle(own)
        out.append(" ".join([*own, rnd.choice(other)]))
    return out


def query_vectors() -> tuple[list[str], np.ndarray]:
    """The SciFact test queries and their vectors from the float32 model (cached)."""
    with (SCIFACT / "queries.jsonl").open() as handle:
        queries = [json.loads(line)["text"] for line in handle]
    path = FOLDER / "queries.npy"
    if not path.exists():
        from server.index.embeddings.local import LocalEmbedder

        FOLDER.mkdir(parents=True, exist_ok=True)  # float32, as the seed chunks' vectors (bench_retrieval_scifact's)
        np.save(path, LocalEmbedder(local=FP32.name).embed(queries, kind="query").astype(np.float32))
    return queries, np.load(path)
