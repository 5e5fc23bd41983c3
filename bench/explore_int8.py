"""Exploring int8 recipes for the local model (issue 16, goal 5): which of the model's MatMuls to quantise, and how,
for the least loss against the float32 vectors at the most speed.

Each recipe (`onnx_export.Recipe`) quantises the float32 export into bench/.cache/int8-explore/. Measured against
float32, whose vectors of the SciFact corpus come from the float32 bench's index (a copy of
bench/.cache/scifact-data, which `MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2 bench/bench_retrieval_scifact.py` builds), in
one process:
- the cosine of each chunk's vector to its float32 vector, over the 983-document subset's chunks
  (`--quick N`: over N of them only, and the speed over the same N, nothing else);
- raw encode speed over a sample of the subset's chunks, float32 and the recipe alternating, best of ROUNDS;
- SciFact full corpus nDCG@10 by vector (exact, a document scored by its best chunk) and hybrid (the engine's own
  search on an index of the recipe's vectors, queries embedded by the recipe, default settings).

    .venv/bin/python bench/explore_int8.py [--quick N [--baseline RECIPE]] [--rounds N] [RECIPE ...]
    (no RECIPE: all of them; --baseline: the speed ratio is that recipe's time / this one's, not float32's)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import time
from collections.abc import Sequence

import apsw
import numpy as np
from bench_ingest import TunedEmbedder
from bench_retrieval_scifact import DISTRACTORS, SEED, data_folder, evaluate, load, run_engine
from common import CACHE, report, save_json, table

from server.index import tuning
from server.index.embeddings.base import InputKind, Vectors
from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.onnx_export import Recipe, quantise
from server.index.embeddings.onnx_runtime import OnnxEncoder, OnnxTuning
from server.index.engine import MemoryIndex
from server.index.model_package import FP32, INT8, WEIGHTS_SHA256, onnx_model_path

WORK = CACHE / "int8-explore"
FP32_INDEX = data_folder(local=FP32.name) / "indexes" / "scifact" / "index.sqlite3"
SPEED_SAMPLE = 300  # subset chunks encoded per speed round
ROUNDS = 2
FFN = ("ffn_in", "ffn_out")
RECIPES = {
    "all": Recipe(),  # the int8 model before this exploration
    "all-reduce-range": Recipe(reduce_range=True),
    "all-per-tensor": Recipe(per_channel=False),
    "float-first": Recipe(float_layers=(0,)),
    "float-last": Recipe(float_layers=(5,)),
    "float-first-last": Recipe(float_layers=(0, 5)),
    "no-attn-out": Recipe(parts=("qkv", "ffn_in", "ffn_out")),
    "no-qkv": Recipe(parts=("attn_out", "ffn_in", "ffn_out")),
    "no-ffn-out": Recipe(parts=("qkv", "attn_out", "ffn_in")),
    "no-ffn-in": Recipe(parts=("qkv", "attn_out", "ffn_out")),
    "ffn": Recipe(parts=FFN),
    "ffn-float-last": Recipe(parts=FFN, float_layers=(5,)),
    **{f"float-ffn-out-{n}": Recipe(float_nodes=(("ffn_out", n),)) for n in range(6)},
    "float-ffn-out-01": Recipe(float_nodes=(("ffn_out", 0), ("ffn_out", 1))),
    "float-ffn-out-012": Recipe(float_nodes=(("ffn_out", 0), ("ffn_out", 1), ("ffn_out", 2))),
    "float-ffn-out-012-reduce-range": Recipe(
        float_nodes=(("ffn_out", 0), ("ffn_out", 1), ("ffn_out", 2)), reduce_range=True
    ),
}


class PrecomputedEmbedder(TunedEmbedder):
    """A recipe as the index's embedder: document vectors from a table computed beforehand (by text hash), queries
    encoded by the recipe's session."""

    def __init__(self, encoder: OnnxEncoder, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        super().__init__(encoder, INT8)
        self.model = model_id
        self.vectors = vectors

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        found = [self.vectors.get(hashlib.sha256(t.encode("utf-8")).hexdigest()) for t in texts]
        if kind == "query" or any(v is None for v in found):
            return super().embed(texts, kind=kind)
        return np.stack(found)  # type: ignore[arg-type]


def reference() -> tuple[list[str], list[str], list[str], np.ndarray]:
    """Every chunk of the float32 SciFact index: (document id, embedded text, hash) and its float32 vector."""
    copy = WORK / "fp32-reference.sqlite3"
    if not copy.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FP32_INDEX, copy)  # the original is hard-linked from the main checkout: never opened here
    db = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    rows = db.execute(
        "SELECT f.path, CASE WHEN c.context = '' THEN c.text ELSE c.context || char(10) || c.text END, c.hash,"
        " e.vector FROM chunks c JOIN files f ON f.id = c.file_id"
        " JOIN embedding_cache e ON e.hash = c.hash AND e.provider = 'local' AND e.model = ? ORDER BY c.id",
        (FP32.model_id,),
    ).fetchall()
    db.close()
    docs = [str(path).rsplit("/", 1)[-1].removesuffix(".md") for path, *_ in rows]
    vectors = np.stack([np.frombuffer(bytes(row[3]), dtype=np.float32) for row in rows])
    return docs, [str(row[1]) for row in rows], [str(row[2]) for row in rows], vectors


def subset_docs() -> set[str]:
    """bench_retrieval_scifact.write_subset's choice, without writing it."""
    corpus, _, qrels = load()
    relevant = sorted({doc for rels in qrels.values() for doc in rels if doc in corpus})
    others = sorted(set(corpus) - set(relevant))
    return set(relevant) | set(random.Random(SEED).sample(others, DISTRACTORS))


def vector_ndcg(docs: list[str], chunks: np.ndarray, queries: np.ndarray, qrels: dict, ids: list[str]) -> float:
    scores = queries @ chunks.T
    doc_index = {doc: n for n, doc in enumerate(dict.fromkeys(docs))}
    column = np.array([doc_index[d] for d in docs])
    names = list(doc_index)
    ranked = {}
    for row, qid in enumerate(ids):
        best = np.full(len(names), -2.0, dtype=np.float32)
        np.maximum.at(best, column, scores[row])
        ranked[qid] = [names[i] for i in np.argsort(-best)[:10]]
    return evaluate(ranked, qrels)[0]


def encoder_for(name: str, recipe: Recipe) -> OnnxEncoder:
    target = WORK / name / INT8.onnx_file
    if not target.exists():
        quantise(onnx_model_path(FP32), target, WEIGHTS_SHA256, recipe)
    return OnnxEncoder(LocalEmbedder().model_dir, target, WEIGHTS_SHA256, OnnxTuning(), INT8.precision)


def speed(fp32: OnnxEncoder, encoder: OnnxEncoder, texts: list[str], rounds: int = ROUNDS) -> tuple[float, float]:
    """(wall, CPU) time ratio fp32 (or another baseline) / recipe over `texts`, alternating, best of `rounds` each."""
    best: dict[str, list[float]] = {"fp32": [1e9, 1e9], "recipe": [1e9, 1e9]}
    for _ in range(rounds):
        for key, model in (("fp32", fp32), ("recipe", encoder)):
            wall, cpu = time.perf_counter(), time.process_time()
            model.encode(texts)
            best[key] = [min(best[key][0], time.perf_counter() - wall), min(best[key][1], time.process_time() - cpu)]
    return best["fp32"][0] / best["recipe"][0], best["fp32"][1] / best["recipe"][1]


def hybrid_ndcg(name: str, encoder: OnnxEncoder, hashes: list[str], vectors: np.ndarray, queries: dict, qrels: dict):
    model_id = f"{INT8.model_id}-explore-{name}"
    tuning.CALIBRATED_MIN_SCORE[("local", model_id)] = tuning.CALIBRATED_MIN_SCORE[("local", FP32.model_id)]
    data = WORK / name / "data"
    shutil.rmtree(data, ignore_errors=True)
    index = MemoryIndex.open(
        data, "scifact", PrecomputedEmbedder(encoder, model_id, dict(zip(hashes, vectors, strict=True))), create=True
    )
    index.index(CACHE / "scifact-md")
    ndcg = evaluate(run_engine(index, queries, "hybrid"), qrels)[0]
    index.close()
    shutil.rmtree(data, ignore_errors=True)
    return ndcg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipes", nargs="*", help=f"of {', '.join(RECIPES)}")
    parser.add_argument("--quick", type=int, help="only cosines and speed, over this many subset chunks")
    parser.add_argument("--baseline", choices=RECIPES, help="with --quick: time against this recipe, not float32")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"speed rounds of each model (default {ROUNDS})")
    args = parser.parse_args()
    unknown = set(args.recipes) - set(RECIPES)
    if unknown:
        parser.error(f"unknown recipes {', '.join(sorted(unknown))}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    docs, texts, hashes, fp32_vectors = reference()
    _, queries, qrels = load()
    chosen = subset_docs()
    subset = [n for n, doc in enumerate(docs) if doc in chosen]
    if args.quick:
        subset = random.Random(1).sample(subset, args.quick)
    model_dir = LocalEmbedder().model_dir
    fp32 = OnnxEncoder(model_dir, onnx_model_path(FP32), WEIGHTS_SHA256, OnnxTuning(), FP32.precision)
    timed_against = encoder_for(args.baseline, RECIPES[args.baseline]) if args.quick and args.baseline else fp32
    ids = list(queries)
    sample = [texts[n] for n in random.Random(2).sample(subset, min(SPEED_SAMPLE, len(subset)))]
    rows = []
    if not args.quick:
        fp32_queries = fp32.encode([queries[q] for q in ids])
        fp32_ndcg = vector_ndcg(docs, fp32_vectors, fp32_queries, qrels, ids)
        print(f"fp32 vector nDCG@10 {fp32_ndcg:.4f}", flush=True)
        rows.append(
            ["fp32", 1.0, 1.0, 1.0, 1.0, fp32_ndcg, hybrid_ndcg("fp32", fp32, hashes, fp32_vectors, queries, qrels)]
        )
        print(*rows[-1], sep="\t", flush=True)
    for name in args.recipes or RECIPES:
        encoder = encoder_for(name, RECIPES[name])
        cosines = np.sum(encoder.encode([texts[n] for n in subset]) * fp32_vectors[subset], axis=1)
        row: list[object] = [name, float(cosines.mean()), float(cosines.min())]
        row += speed(timed_against, encoder, [texts[n] for n in subset] if args.quick else sample, args.rounds)
        if not args.quick:
            vectors = encoder.encode(texts)
            row.append(vector_ndcg(docs, vectors, encoder.encode([queries[q] for q in ids]), qrels, ids))
            row.append(hybrid_ndcg(name, encoder, hashes, vectors, queries, qrels))
        print(*row, sep="\t", flush=True)
        rows.append(row)
    if args.quick:
        return
    headers = ["recipe", "cosine mean", "cosine min", "speed wall x", "speed CPU x", "vector nDCG@10", "hybrid"]
    body = (
        f"{len(subset)} subset chunks for the cosines; speed over {len(sample)} of them, {ROUNDS} rounds alternating "
        f"with fp32 (ratio fp32 time / recipe time); nDCG@10 on the full corpus ({len(texts)} chunks, 300 queries)."
    )
    report("int8_recipes", "int8 recipes against float32 (bench/explore_int8.py)", body + "\n\n" + table(headers, rows))
    save_json("int8_recipes", {"rows": rows})


if __name__ == "__main__":
    sys.exit(main())
