"""Benchmark: ingest speed on the 983-document SciFact subset, through the product's indexing path, against raw
encode of the same chunks, for the float32 local model and its int8 quantisation (MEMORY_LOCAL_MODEL), in one run.

The subset is the one peers were measured on: the 283 abstracts relevant to a test query plus 700 others drawn with
a fixed seed, one markdown file each (`# title`, blank line, text), never truncated. mcp-memory-service ingests it at
18.1 documents/s (it truncates at 256 tokens; we embed 1.58x its tokens). Each round runs every model, alternating,
and each figure is the best of the rounds (the machine is shared: compare the models' ratio, not the figures). "Raw"
is `OnnxEncoder.encode` over the distinct texts the index embedded; "index" is `MemoryIndex.index()` from an empty
database (chunking, the model, SQLite, FTS5, sqlite-vec). CPU is this process's CPU time (all threads), a fairer
figure than wall time on a busy machine. The cosine of each model's vectors to the float32 ones is reported too.
Both models run with the runtime's default tuning (`OnnxTuning()`: one model call per CPU side by side).

    .venv/bin/python bench/bench_ingest.py [ROUNDS]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np
from bench_retrieval_scifact import SEED, load, write_subset
from common import CACHE, median, report, save_json, table

from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.onnx_runtime import OnnxEncoder, OnnxTuning
from server.index.engine import MemoryIndex
from server.index.model_package import FP32, INT8, WEIGHTS_SHA256, LocalModel, onnx_model_path

ROUNDS = 2  # unless given on the command line
PEER_DOCS_PER_S = 18.1  # mcp-memory-service 12.4 on this subset (issue 16)
MODELS = {"fp32": FP32, "int8": INT8}  # the first is the reference for the cosines
QUERIES = 100


class TunedEmbedder(LocalEmbedder):
    """The local embedder with a given encoder instead of the process-wide one."""

    def __init__(self, encoder: OnnxEncoder, model: LocalModel) -> None:
        super().__init__(local=model.name)
        self.encoder = encoder

    def _load(self) -> OnnxEncoder:
        return self.encoder


def cpu_and_wall() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def run_index(
    encoder: OnnxEncoder, model: LocalModel, folder: Path, data: Path
) -> tuple[float, float, int, MemoryIndex]:
    shutil.rmtree(data, ignore_errors=True)
    index = MemoryIndex.open(data, "ingest", TunedEmbedder(encoder, model), create=True)
    cpu, wall = cpu_and_wall()
    result = index.index(folder)
    cpu_end, wall_end = cpu_and_wall()
    return wall_end - wall, cpu_end - cpu, result.chunks_embedded, index


def embedded_texts(index: MemoryIndex) -> list[str]:
    rows = index.store.connection().execute(
        "SELECT CASE WHEN context = '' THEN text ELSE context || char(10) || text END FROM chunks ORDER BY id"
    )
    return list(dict.fromkeys(str(text) for (text,) in rows))


def stored_vectors(index: MemoryIndex) -> dict[str, np.ndarray]:
    rows = index.store.connection().execute("SELECT hash, vector FROM embedding_cache")
    return {str(h): np.frombuffer(bytes(v), dtype=np.float32) for h, v in rows}  # type: ignore[arg-type]


def rounds() -> int:
    """ROUNDS, or the count the command line gives."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=ROUNDS, help=f"rounds of every model (default {ROUNDS})")
    count = int(parser.parse_args().rounds)
    if count < 1:
        parser.error("rounds must be at least 1")
    return count


def main() -> None:
    count = rounds()  # before the models load: a bad count fails at once
    folder, data = CACHE / "ingest-md", CACHE / "ingest-data"
    chosen, relevant = write_subset(folder)
    docs = len(chosen)
    _, queries, _ = load()
    asks = list(queries.values())[:QUERIES]
    model_dir = LocalEmbedder().model_dir
    encoders = {
        name: OnnxEncoder(model_dir, onnx_model_path(model), WEIGHTS_SHA256, OnnxTuning(), model.precision)
        for name, model in MODELS.items()
    }
    for encoder in encoders.values():
        encoder.encode(asks[:16])  # warm up threads and allocator
    runs: dict[str, dict[str, list[float]]] = {name: {} for name in MODELS}
    texts: list[str] = []
    vectors: dict[str, dict[str, np.ndarray]] = {}
    raw_vectors: dict[str, np.ndarray] = {}
    loads = [os.getloadavg()[0]]
    for round_number in range(count):
        for name, encoder in encoders.items():
            seconds, cpu, embedded, index = run_index(encoder, MODELS[name], folder, data)
            runs[name].setdefault("index_s", []).append(seconds)
            runs[name].setdefault("index_cpu_s", []).append(cpu)
            texts = texts or embedded_texts(index)
            vectors.setdefault(name, stored_vectors(index))
            index.close()
            shutil.rmtree(data, ignore_errors=True)
            cpu_start, wall_start = cpu_and_wall()
            raw_vectors[name] = encoder.encode(texts)
            cpu_end, wall_end = cpu_and_wall()
            runs[name].setdefault("raw_s", []).append(wall_end - wall_start)
            runs[name].setdefault("raw_cpu_s", []).append(cpu_end - cpu_start)
            latencies = []
            for ask in asks:
                started = time.perf_counter()
                encoder.encode([ask])
                latencies.append(time.perf_counter() - started)
            runs[name].setdefault("query_p50_ms", []).append(median(latencies) * 1000)
            loads.append(os.getloadavg()[0])
            raw_s = wall_end - wall_start
            print(f"round {round_number} {name}: index {seconds:.1f} s ({embedded} chunks), raw {raw_s:.1f} s")
        # a report after every round: a run stopped early still leaves its figures
        write_report(docs, relevant, round_number + 1, runs, texts, encoders, vectors, raw_vectors, loads)


def write_report(
    docs: int,
    relevant: int,
    rounds: int,
    runs: dict[str, dict[str, list[float]]],
    texts: list[str],
    encoders: dict[str, OnnxEncoder],
    vectors: dict[str, dict[str, np.ndarray]],
    raw_vectors: dict[str, np.ndarray],
    loads: list[float],
) -> None:
    tokenizer = next(iter(encoders.values())).tokenizer
    tokens = sum(len(encoding.ids) for encoding in tokenizer.encode_batch([t.strip() for t in texts]))
    names = [name for name in MODELS if name in vectors]
    reference = names[0]
    rows, summary, cosines, rates = [], {}, {}, {}
    for name in names:
        best = {key: min(values) for key, values in runs[name].items()}
        index_rate, raw_rate = docs / best["index_s"], docs / best["raw_s"]
        rates[name] = (index_rate, raw_rate)
        stored = [float(vectors[reference][h] @ vectors[name][h]) for h in vectors[reference]]
        raw = np.sum(raw_vectors[reference] * raw_vectors[name], axis=1)
        cosines[name] = {
            "index_min": min(stored),
            "index_mean": float(np.mean(stored)),
            "raw_min": float(raw.min()),
            "raw_mean": float(raw.mean()),
        }
        summary[name] = {**runs[name], "docs_per_s": index_rate, "raw_docs_per_s": raw_rate, "cosine": cosines[name]}
        rows.append(
            [
                name,
                index_rate,
                len(texts) / best["index_s"],
                tokens / best["index_s"],
                best["index_cpu_s"] / docs * 1000,
                raw_rate,
                best["raw_cpu_s"] / docs * 1000,
                index_rate / raw_rate,
                best["query_p50_ms"],
                f"{cosines[name]['index_mean']:.4f} / {cosines[name]['index_min']:.4f}",
            ]
        )
    ratios = ", ".join(
        f"{name} / {reference}: {rates[name][0] / rates[reference][0]:.2f}x index, "
        f"{rates[name][1] / rates[reference][1]:.2f}x raw"
        for name in names[1:]
    )
    body = (
        f"{docs} SciFact abstracts ({relevant} relevant to a test query, {docs - relevant} others, seed {SEED}) "
        f"as markdown files: {len(texts)} distinct chunks, {tokens} tokens embedded ([CLS]/[SEP] included, none "
        f"truncated). Best of {rounds} rounds, models alternating; load average {min(loads):.1f}-{max(loads):.1f} "
        f"on {os.cpu_count()} CPUs during the run.\n\n"
        + table(
            [
                "local model",
                "index docs/s",
                "chunks/s",
                "tokens/s",
                "index CPU ms/doc",
                "raw encode docs/s",
                "raw CPU ms/doc",
                "index / raw",
                "query p50 ms",
                f"cosine to {reference} mean / min",
            ],
            rows,
        )
        + f"\n\n{ratios}; mcp-memory-service on this subset: {PEER_DOCS_PER_S} docs/s. The cosines are over the "
        "vectors the index stored, per distinct chunk."
    )
    report("ingest", "Ingest speed on the SciFact 983-document subset", body)
    save_json(
        "ingest",
        {
            "docs": docs,
            "chunks": len(texts),
            "tokens": tokens,
            "rounds": rounds,
            "load_average": loads,
            "models": {name: MODELS[name].model_id for name in names},
            "runs": summary,
        },
    )


if __name__ == "__main__":
    main()
