"""Benchmark 1: retrieval quality on BEIR SciFact through the engine's own indexing and search.

One markdown file per abstract (`# title`, blank line, text); a document is scored by its best chunk.
Reports nDCG@10 and recall@10 for keyword-only, vector-only and hybrid, the fusion variants measured to choose
the defaults, and the FTS5 tokenizer comparison (porter vs plain unicode61). The local model is the server's
(MEMORY_LOCAL_MODEL); another than the float32 one keeps its index and its results under names of its own.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from common import CACHE, RESULTS, SCIFACT, report, save_json, table, timer

from server.index.embeddings.base import InputKind, Vectors
from server.index.embeddings.local import LocalEmbedder
from server.index.embeddings.select import EmbeddingSettings
from server.index.engine import MemoryIndex
from server.index.fts import match_expression
from server.index.fusion import FusionWeights
from server.index.model_package import FP32
from server.index.search import MAX_LIMIT, build_options
from server.index.tuning import SearchDefaults

K = 10
DISTRACTORS = 700  # the subset: every abstract relevant to a test query and this many others
SEED = 3


def load() -> tuple[dict[str, tuple[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    corpus = {}
    with (SCIFACT / "corpus.jsonl").open() as handle:
        for line in handle:
            doc = json.loads(line)
            corpus[doc["_id"]] = (doc["title"], doc["text"])
    queries = {}
    with (SCIFACT / "queries.jsonl").open() as handle:
        for line in handle:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with (SCIFACT / "qrels" / "test.tsv").open() as handle:
        next(handle)
        for line in handle:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels[qid][did] = int(score)
    return corpus, {q: queries[q] for q in qrels}, dict(qrels)


def write_markdown(corpus: dict[str, tuple[str, str]]) -> None:
    folder = CACHE / "scifact-md" / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    for doc_id, (title, text) in corpus.items():
        path = folder / f"{doc_id}.md"
        content = f"# {title}\n\n{text}\n"
        if not path.exists() or path.read_text("utf-8") != content:
            path.write_text(content, "utf-8")


def write_subset(folder: Path) -> tuple[list[str], int]:
    """The 983-document subset peers were measured on (in `folder`/memory): the abstracts relevant to a test query
    and DISTRACTORS others drawn with a fixed seed. Returns the chosen ids and how many are relevant."""
    corpus, _, qrels = load()
    relevant = sorted({doc for rels in qrels.values() for doc in rels if doc in corpus})
    others = sorted(set(corpus) - set(relevant))
    chosen = relevant + random.Random(SEED).sample(others, DISTRACTORS)
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "memory").mkdir(parents=True)
    for doc in chosen:
        title, text = corpus[doc]
        (folder / "memory" / f"{doc}.md").write_text(f"# {title}\n\n{text}\n", "utf-8")
    return chosen, len(relevant)


def doc_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md")


def evaluate(ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> tuple[float, float]:
    ndcg, recall = [], []
    for qid, rels in qrels.items():
        docs = ranked.get(qid, [])[:K]
        dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(docs))
        ideal = sum(r / math.log2(i + 2) for i, r in enumerate(sorted(rels.values(), reverse=True)[:K]))
        ndcg.append(dcg / ideal if ideal else 0.0)
        recall.append(len(set(docs) & {d for d, r in rels.items() if r > 0}) / max(1, len(rels)))
    return sum(ndcg) / len(ndcg), sum(recall) / len(recall)


def run_engine(
    index: MemoryIndex, queries: dict[str, str], mode: str, feedback_weight: float | None = None
) -> dict[str, list[str]]:
    options = build_options(limit=MAX_LIMIT, mode=mode, feedback_weight=feedback_weight)
    ranked = {}
    for qid, text in queries.items():
        best: dict[str, float] = {}
        for hit in index.search(text, options).hits:
            doc = doc_of(hit.path)
            best[doc] = max(best.get(doc, 0.0), hit.score)
        ranked[qid] = sorted(best, key=lambda d: -best[d])
    return ranked


def run_fts_variant(index: MemoryIndex, queries: dict[str, str], tokenizer: str) -> dict[str, list[str]]:
    """Keyword-only ranking over the same chunks with another FTS5 tokenizer, built on the side."""
    db = index.store.connection()
    db.execute("DROP TABLE IF EXISTS temp.bench_fts")
    db.execute(f"CREATE VIRTUAL TABLE temp.bench_fts USING fts5(text, heading, tokenize='{tokenizer}')")
    db.execute("INSERT INTO temp.bench_fts(rowid, text, heading) SELECT id, text, heading FROM main.chunks")
    paths = dict(db.execute("SELECT c.id, f.path FROM chunks c JOIN files f ON f.id = c.file_id"))
    ranked = {}
    for qid, text in queries.items():
        match = match_expression(text)
        best: dict[str, float] = {}
        if match:
            rows = db.execute(
                "SELECT rowid, bm25(bench_fts, 1.0, 0.5) AS r FROM temp.bench_fts WHERE bench_fts MATCH ?"
                " ORDER BY r LIMIT 400",
                (match,),
            )
            for chunk, rank in rows:
                doc = doc_of(paths[chunk])
                best[doc] = max(best.get(doc, float("-inf")), -rank)
        ranked[qid] = sorted(best, key=lambda d: -best[d])
    db.execute("DROP TABLE temp.bench_fts")
    return ranked


class CountingEmbedder(LocalEmbedder):
    """The local model, counting the chunks it embeds, whoever asks: indexing or a background rebuild."""

    documents = 0

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if kind == "document":
            self.documents += len(texts)
        return super().embed(texts, kind=kind)


def model_suffix(local: str) -> str:
    """What the names of a local model's index and results end with: nothing for the float32 model, "-int8" for
    the int8 one (its own folders, so switching models never rebuilds the other's index)."""
    return "" if local == FP32.name else "-" + local.rsplit("-", 1)[-1]


def data_folder(subset: bool = False, local: str | None = None) -> Path:
    """The folder of the bench's index of the full corpus (or `subset`) for the local model `local` (None: the
    server's, MEMORY_LOCAL_MODEL)."""
    suffix = model_suffix(local or EmbeddingSettings.from_env(os.environ).local_model)
    return CACHE / (f"scifact-subset-data{suffix}" if subset else f"scifact-data{suffix}")


def main() -> None:
    corpus, queries, qrels = load()
    write_markdown(corpus)
    local = EmbeddingSettings.from_env(os.environ).local_model
    suffix = model_suffix(local)
    embedder = CountingEmbedder(local=local)
    with timer() as t:  # opening starts a background rebuild when the model changed, which indexing waits for
        index = MemoryIndex.open(data_folder(), "scifact", embedder, create=True)
        index.index(CACHE / "scifact-md")
    status = index.status()
    chunks = sum(status.chunks.values())
    print(f"indexed {status.files} files, {chunks} chunks in {t[0]:.0f} s ({embedder.documents} embedded)")

    rows, results = [], {}
    for mode in ("keyword", "vector", "hybrid"):
        ndcg, recall = evaluate(run_engine(index, queries, mode), qrels)
        results[mode] = {"ndcg@10": ndcg, "recall@10": recall}
        rows.append([mode, ndcg, recall])
        print(f"{mode}: nDCG@10 {ndcg:.4f} recall@10 {recall:.4f}", flush=True)
    defaults = index.settings.weights

    variants = []
    for normalise in ("minmax", "max"):
        for vector_weight in (0.5, 0.6, 0.7, 0.8):
            weights = FusionWeights(vector=vector_weight, keyword=round(1 - vector_weight, 2), normalise=normalise)
            index.settings = replace(index.settings, weights=weights)
            ndcg, recall = evaluate(run_engine(index, queries, "hybrid"), qrels)
            variants.append([normalise, vector_weight, round(1 - vector_weight, 2), ndcg, recall])
            print(f"hybrid {normalise} {vector_weight}: nDCG@10 {ndcg:.4f}", flush=True)
    index.settings = replace(index.settings, weights=defaults)

    feedback = []  # vector pseudo-relevance feedback (server.index.feedback), hybrid
    for weight in (0.0, 0.25, 0.5):
        ndcg, recall = evaluate(run_engine(index, queries, "hybrid", weight), qrels)
        feedback.append([weight, ndcg, recall])
        print(f"hybrid feedback {weight}: nDCG@10 {ndcg:.4f}", flush=True)

    tokenizers = []
    for name in ("porter unicode61 remove_diacritics 2", "unicode61 remove_diacritics 2"):
        ndcg, recall = evaluate(run_fts_variant(index, queries, name), qrels)
        tokenizers.append([name, ndcg, recall])
    index.close()
    subset = run_subset(embedder, queries, qrels)

    body = "\n\n".join(
        [
            f"{len(corpus)} abstracts as {status.files.get('memory', 0)} markdown files, {chunks} chunks; "
            f"{len(queries)} test queries; document score = best chunk score. Indexing took {t[0]:.0f} s "
            f"({embedder.documents} chunks embedded this run, by indexing or by a background rebuild for a new "
            "model; the rest came from the embedding cache).",
            "## Search modes (engine defaults: "
            f"{defaults.normalise} BM25, {defaults.vector} vector + {defaults.keyword} keyword)\n\n"
            + table(["mode", "nDCG@10", "recall@10"], rows),
            "## Fusion variants (hybrid)\n\n"
            + table(["BM25 normalisation", "vector w", "keyword w", "nDCG@10", "recall@10"], variants),
            "## Vector feedback (hybrid; the default weight is "
            f"{SearchDefaults().feedback_weight})\n\n" + table(["feedback weight", "nDCG@10", "recall@10"], feedback),
            "## FTS5 tokenizer (keyword-only)\n\n" + table(["tokenizer", "nDCG@10", "recall@10"], tokenizers),
            f"## The {subset['docs']}-document subset (the one peers were measured on, bench_ingest.py)\n\n"
            f"{subset['relevant']} abstracts relevant to a test query and {subset['docs'] - subset['relevant']} "
            f"others (seed {SEED}), {subset['chunks']} chunks; the same 300 queries, engine defaults.\n\n"
            + table(["mode", "nDCG@10", "recall@10"], [["hybrid", subset["ndcg@10"], subset["recall@10"]]]),
        ]
    )
    name = "retrieval_scifact" + suffix.replace("-", "_")
    report(name, f"Retrieval on BEIR SciFact ({embedder.model})", body)
    save_json(
        name,
        {
            "modes": results,
            "variants": variants,
            "feedback": feedback,
            "tokenizers": tokenizers,
            "chunks": chunks,
            "subset": subset,
        },
    )
    _plot(rows, name)


def run_subset(embedder: LocalEmbedder, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict:
    """Hybrid search over an index of the 983-document subset alone (its own BM25 statistics, as peers had)."""
    folder = CACHE / "scifact-subset-md"
    chosen, relevant = write_subset(folder)
    index = MemoryIndex.open(data_folder(subset=True), "subset", embedder, create=True)
    index.index(folder)
    chunks = sum(index.status().chunks.values())
    ndcg, recall = evaluate(run_engine(index, queries, "hybrid"), qrels)
    index.close()
    print(f"subset hybrid: nDCG@10 {ndcg:.4f} recall@10 {recall:.4f}", flush=True)
    return {"docs": len(chosen), "relevant": relevant, "chunks": chunks, "ndcg@10": ndcg, "recall@10": recall}


def _plot(rows: list[list[object]], name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    modes = [str(r[0]) for r in rows]
    ax.bar(modes, [float(r[1]) for r in rows], color=["#8da0cb", "#66c2a5", "#fc8d62"])  # type: ignore[arg-type]
    ax.axhline(0.71, color="grey", linestyle="--", linewidth=1, label="target 0.71")
    ax.set_ylim(0.5, 0.8)
    ax.set_ylabel("nDCG@10")
    ax.set_title("SciFact retrieval by search mode")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=120)


if __name__ == "__main__":
    main()
