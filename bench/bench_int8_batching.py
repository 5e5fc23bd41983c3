"""Benchmark: the int8 local model one text per call (what the onnx runtime does) against batched calls (what it
did before, as float32 still does), on chunk-sized SciFact texts.

Dynamic quantisation takes one activation scale over a model call's whole tensor, so a batched text's int8 vector
depends on its batch-mates. Reported: how far each text's batched vector is from its vector alone (cosine), and the
encode time of both ways over the same texts, alternating, best of ROUNDS. The texts: the first DOCS SciFact
abstracts, each cut into pieces of PIECE_WORDS words under its title (about the product's chunk size).

    .venv/bin/python bench/bench_int8_batching.py
"""

from __future__ import annotations

import time

import numpy as np
from bench_retrieval_scifact import load
from common import report, save_json, table

from server.index.embeddings.onnx_runtime import MAX_BATCH, OnnxEncoder
from server.index.model_package import INT8, WEIGHTS_SHA256, onnx_model_path, packaged_model_dir

DOCS = 300
PIECE_WORDS = 150
ROUNDS = 3


def texts() -> list[str]:
    corpus, _, _ = load()
    pieces = []
    for title, text in list(corpus.values())[:DOCS]:
        words = text.split()
        pieces += [title + "\n" + " ".join(words[at : at + PIECE_WORDS]) for at in range(0, len(words), PIECE_WORDS)]
    return pieces


def main() -> None:
    chunks = texts()
    one_per_call = OnnxEncoder(packaged_model_dir(), onnx_model_path(INT8), WEIGHTS_SHA256, precision=INT8.precision)
    batched = OnnxEncoder(packaged_model_dir(), onnx_model_path(INT8), WEIGHTS_SHA256, precision=INT8.precision)
    batched.max_batch = MAX_BATCH  # the baseline: batched as float32 is
    for encoder in (one_per_call, batched):
        encoder.encode(chunks[:16])  # warm up threads and allocator
    seconds: dict[str, list[float]] = {"one text per call": [], "batched": []}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(ROUNDS):
        for name, encoder in (("one text per call", one_per_call), ("batched", batched)):
            started = time.perf_counter()
            vectors[name] = encoder.encode(chunks)
            seconds[name].append(time.perf_counter() - started)
    alone = np.stack([one_per_call.encode([chunk])[0] for chunk in chunks])
    rows = []
    for name in seconds:
        cosines = np.sum(vectors[name] * alone, axis=1)
        rows.append([name, min(seconds[name]), len(chunks) / min(seconds[name]), float(cosines.min()),
                     float(cosines.mean())])  # fmt: skip
    ratio = min(seconds["one text per call"]) / min(seconds["batched"])
    body = (
        f"{len(chunks)} texts ({DOCS} SciFact abstracts in pieces of {PIECE_WORDS} words under their title), model "
        f"{INT8.model_id}; best of {ROUNDS} rounds, alternating.\n\n"
        + table(["calls", "encode s", "texts/s", "cosine to alone, min", "mean"], rows)
        + f"\n\nOne text per call takes {ratio:.3f}x the batched time."
    )
    report("int8_batching", "The int8 model: one text per call against batched calls", body)
    save_json("int8_batching", {"texts": len(chunks), "seconds": seconds, "ratio": ratio, "rows": rows})


if __name__ == "__main__":
    main()
