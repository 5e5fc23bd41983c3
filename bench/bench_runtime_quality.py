"""Benchmark: retrieval quality of the two local embedding runtimes (torch and onnx) on a SciFact subset.

The runtimes differ only in what computes the vectors, so this ranks by vector alone: every test query with its
relevant abstracts plus seeded random distractors (1,000 abstracts in all), embedded by each runtime, nDCG@10 and
recall@10 by cosine; and the cosine between the two runtimes' vectors of each abstract. The full engine benchmarks
(bench_retrieval_scifact.py, bench_locomo.py with MEMORY_EMBEDDING_RUNTIME) take tens of minutes per runtime here.

    .venv/bin/python bench/bench_runtime_quality.py
"""

from __future__ import annotations

import random

import numpy as np
from bench_retrieval_scifact import evaluate, load
from common import report, save_json, table, timer

from server.index.embeddings.local import RUNTIMES, LocalEmbedder
from server.index.model_package import FP32

DOCS = 1_000
K = 10


def main() -> None:
    corpus, queries, qrels = load()
    relevant = sorted({doc for rels in qrels.values() for doc in rels if doc in corpus})
    others = sorted(set(corpus) - set(relevant))
    chosen = relevant + random.Random(3).sample(others, max(0, DOCS - len(relevant)))
    asked = {qid: queries[qid] for qid in qrels if qid in queries}
    texts = [f"{corpus[doc][0]}\n\n{corpus[doc][1]}" for doc in chosen]
    rows, vectors, results = [], {}, {}
    for runtime in RUNTIMES:
        embedder = LocalEmbedder(runtime=runtime, local=FP32.name)  # the model both runtimes run
        with timer() as t:
            docs = embedder.embed(texts)
        asks = embedder.embed(list(asked.values()), kind="query")
        ranked = {qid: [chosen[i] for i in np.argsort(-(docs @ asks[n]))[:K]] for n, qid in enumerate(asked)}
        ndcg, recall = evaluate(ranked, qrels)
        vectors[runtime] = docs
        results[runtime] = {"ndcg@10": ndcg, "recall@10": recall, "docs_per_s": len(texts) / t[0]}
        rows.append([runtime, ndcg, recall, len(texts) / t[0]])
        print(f"{runtime}: nDCG@10 {ndcg:.4f} recall@10 {recall:.4f}", flush=True)
    cosines = np.sum(vectors["torch"] * vectors["onnx"], axis=1)
    body = (
        f"{len(asked)} queries, {len(chosen)} abstracts ({len(relevant)} relevant), ranked by vector only.\n\n"
        + table(["runtime", "nDCG@10", "recall@10", "abstracts/s"], rows)
        + f"\n\nCosine between the runtimes' vectors of the same abstract: min {cosines.min():.6f}, "
        f"mean {cosines.mean():.6f}; nDCG@10 differs by {abs(rows[0][1] - rows[1][1]):.4f}."
    )
    report("runtime_quality", "Retrieval quality by local embedding runtime (SciFact subset)", body)
    save_json("runtime_quality", {**results, "min_cosine": float(cosines.min()), "docs": len(chosen)})


if __name__ == "__main__":
    main()
