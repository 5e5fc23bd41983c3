"""The search options of issue 16, goal 6, each measured on both data sets against the defaults in the same run:
MMR diversity (`mmr_lambda`), the recency boost for daily logs (`recency_half_life_days`), the `min_score`
threshold, and reranking through Voyage's rerank API (against the local fake of tests/fakes: latency only, its
quality needs a real key).

- SciFact (full corpus, the index bench_retrieval_scifact.py built for the local model, reused: nothing is
  embedded again but the queries): nDCG@10 and recall@10 by best chunk per document, as that bench, plus the
  distinct documents among the first 10 hits (what diversity is for).
- LoCoMo (development half, by the protocol of ../shared/data/locomo-dev/README.md, 40 hits): r@5, r@10,
  r@50lines, r@100lines; the indexes are built once in bench/.cache/options/ with the engine that
  `memory-server index` runs, and searched in process with the engine `memory-server search` runs.
- Both: search p50 in ms without the query embedding (each query is embedded once and reused by every variant),
  and the share of empty answers.

    .venv/bin/python bench/bench_options.py [--quick] [--only PREFIX]
    (--quick: the first 100 questions of each set; --only mmr: those variants beside the one before, into
    bench/results/options-mmr.md, a working file: options.md, from a run of every variant, is the one kept)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from bench_locomo import HITS, LOCOMO, build, recall_of, write_folder
from bench_retrieval_scifact import data_folder, doc_of, evaluate
from bench_retrieval_scifact import load as load_scifact
from common import CACHE, report, save_json, table

from server.index.embeddings.base import InputKind, Vectors
from server.index.embeddings.local import LocalEmbedder
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.rerank import RERANK_CANDIDATES, GuardedReranker, VoyageReranker
from server.index.search import MAX_LIMIT, build_options
from tests.fakes.provider_api import FakeProviderAPI, serve

BEFORE = {"min_score": 0.0}  # the defaults before these options: no threshold, no reordering
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("before (min_score 0)", BEFORE),
    ("min_score 0.3", {"min_score": 0.3}),
    ("min_score 0.35 on every hit", {"min_score": 0.35}),
    ("auto: 0.35 gate on the best hit (new default)", {}),
    ("min_score 0.4", {"min_score": 0.4}),
    ("mmr_lambda 0.9", {**BEFORE, "mmr_lambda": 0.9}),
    ("mmr_lambda 0.7", {**BEFORE, "mmr_lambda": 0.7}),
    ("mmr_lambda 0.5", {**BEFORE, "mmr_lambda": 0.5}),
    ("recency 30 days", {**BEFORE, "recency_half_life_days": 30}),
    ("recency 365 days", {**BEFORE, "recency_half_life_days": 365}),
    ("rerank (fake API)", {**BEFORE, "rerank": True}),
]
KEY = "pa-bench-fake-key"


class QueryMemo:
    """The local model, each query embedded once for all variants (documents are never embedded here)."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.provider, self.model, self.dimensions = inner.provider, inner.model, inner.dimensions
        self.max_tokens, self.tokenizer = inner.max_tokens, inner.tokenizer
        self.memo: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if kind != "query":
            return self.inner.embed(texts, kind=kind)
        missing = [t for t in texts if t not in self.memo]
        if missing:
            self.memo.update(zip(missing, self.inner.embed(missing, kind="query"), strict=True))
        return np.stack([self.memo[t] for t in texts])


def _open(data_dir: Any, name: str, embedder: QueryMemo, settings: EngineSettings) -> MemoryIndex:
    index = MemoryIndex.open(data_dir, name, embedder, create=True, settings=settings)
    if index.needs_rebuild and index.store.chunk_count():
        raise SystemExit(f"{data_dir}/{name} was built with other chunk settings or model: rebuild it first")
    return index


def _timed(index: MemoryIndex, query: str, options: Any) -> tuple[list[Any], float]:
    result = index.search(query, options)
    return result.hits, result.search_ms


def run_scifact(embedder: QueryMemo, settings: EngineSettings, quick: bool) -> dict[str, dict[str, float]]:
    _corpus, queries, qrels = load_scifact()
    if quick:
        queries = dict(list(queries.items())[:100])
        qrels = {q: qrels[q] for q in queries}
    index = _open(data_folder(), "scifact", embedder, settings)
    out = {}
    try:
        for name, given in VARIANTS:
            options = build_options(limit=MAX_LIMIT, **given)
            ranked, distinct, times, empty = {}, [], [], 0
            for qid, text in queries.items():
                hits, ms = _timed(index, text, options)
                times.append(ms)
                empty += not hits
                best: dict[str, float] = {}
                for position, hit in enumerate(hits):  # the options order hits: rank, not score, says where
                    best.setdefault(doc_of(hit.path), -position)
                ranked[qid] = sorted(best, key=lambda d: -best[d])
                distinct.append(len({doc_of(hit.path) for hit in hits[:10]}))
            ndcg, recall = evaluate(ranked, qrels)
            out[name] = {"nDCG@10": ndcg, "recall@10": recall, "docs in 10 hits": statistics.mean(distinct),
                         "empty": empty / len(queries), "p50 ms": statistics.median(times)}  # fmt: skip
            print(f"scifact {name}: {out[name]}", flush=True)
    finally:
        index.close()
    return out


def run_locomo(embedder: QueryMemo, settings: EngineSettings, quick: bool) -> dict[str, dict[str, float]]:
    conversations = [build(sample) for sample in json.loads((LOCOMO / "locomo-dev.json").read_text())]
    work = CACHE / "options"
    indexes = {}
    for conversation in conversations:
        index = _open(work / "data", conversation.name, embedder, settings)
        if not index.store.chunk_count():
            started = time.perf_counter()
            index.index(write_folder(conversation, work / "folders"))
            print(f"indexed {conversation.name} in {time.perf_counter() - started:.0f} s", flush=True)
        indexes[conversation.name] = index
    out = {}
    try:
        for name, given in VARIANTS:
            options = build_options(limit=HITS, **given)
            scores, times, empty = [], [], 0
            for conversation in conversations:
                questions = conversation.questions[: 20 if quick else None]
                for question, wanted in questions:
                    hits, ms = _timed(indexes[conversation.name], question, options)
                    times.append(ms)
                    empty += not hits
                    as_dicts = [{"path": h.path, "start_line": h.start_line, "end_line": h.end_line} for h in hits]
                    score = recall_of(as_dicts, wanted, conversation.turns)
                    if score:
                        scores.append(score)
            means = {key: statistics.mean(s[key] for s in scores) for key in scores[0]}
            out[name] = {**means, "empty": empty / len(times), "p50 ms": statistics.median(times)}
            print(f"locomo {name}: {out[name]}", flush=True)
    finally:
        for index in indexes.values():
            index.close()
    return out


def run_off_topic(embedder: QueryMemo, settings: EngineSettings) -> list[list[object]]:
    """How often an answer comes back empty (and says so) before and with the new default: the 300 SciFact test
    queries on every conversation's index (off-topic), and each conversation's questions on the next one's index
    (unanswerable, same kind of talk); and the answerable questions on their own index."""
    _corpus, queries, _qrels = load_scifact()
    conversations = [build(sample) for sample in json.loads((LOCOMO / "locomo-dev.json").read_text())]
    rows = []
    for name, given in (("before (min_score 0)", BEFORE), ("new default (auto: 0.35 gate)", {})):
        options = build_options(limit=HITS, **given)
        counts = {"off-topic": [0, 0], "unanswerable": [0, 0], "answerable": [0, 0]}
        for number, conversation in enumerate(conversations):
            index = _open(CACHE / "options" / "data", conversation.name, embedder, settings)
            foreign = conversations[(number + 1) % len(conversations)]
            asked = {
                "off-topic": list(queries.values()),
                "unanswerable": [q for q, _ in foreign.questions],
                "answerable": [q for q, _ in conversation.questions],
            }
            try:
                for kind, texts in asked.items():
                    for text in texts:
                        result = index.search(text, options)
                        counts[kind][0] += not result.hits and "nothing relevant" in (result.notice or "")
                        counts[kind][1] += 1
            finally:
                index.close()
        rows.append([name, *(empty / total for empty, total in counts.values())])
        print(f"empty answers {name}: {rows[-1]}", flush=True)
    return rows


def rerank_round_trip(reranker: GuardedReranker, rounds: int = 200) -> float:
    """p50 ms of one rerank of RERANK_CANDIDATES passages of SciFact's length against the fake: the client's own
    cost (JSON, HTTP over a local socket, parsing); a real API adds its network and model time to this."""
    passage = "Ethanol stress increases the expression of genes involved in glycolysis and trehalose synthesis. " * 4
    times = []
    for n in range(rounds):
        started = time.perf_counter()
        reranker.rerank(f"query {n} about stress genes", [passage] * RERANK_CANDIDATES)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 SciFact queries, 20 questions per conversation")
    parser.add_argument("--only", help="the variants whose name starts with this (and the one before), e.g. mmr")
    args = parser.parse_args()
    if args.only:
        VARIANTS[1:] = [(name, given) for name, given in VARIANTS[1:] if name.startswith(args.only)]
    embedder = QueryMemo(LocalEmbedder())
    with serve(FakeProviderAPI(api_key=KEY)) as api:
        reranker = GuardedReranker(VoyageReranker(model="rerank-2-lite", api_key=KEY, base_url=api.url))
        settings = replace(EngineSettings(), reranker=reranker)
        scifact = run_scifact(embedder, settings, args.quick)
        locomo = run_locomo(embedder, settings, args.quick)
        round_trip = rerank_round_trip(reranker)
    off_topic = run_off_topic(embedder, settings)
    sci_rows = [[name, *values.values()] for name, values in scifact.items()]
    loc_rows = [[name, *values.values()] for name, values in locomo.items()]
    body = "\n\n".join(
        [
            "Each variant changes one search option from the defaults the engine had before (no threshold, no "
            "diversity, no recency boost, no reranking); the new default is min_score auto, 0.35 for the local "
            "model's hybrid score. Search p50 excludes the query embedding. "
            + ("QUICK RUN (100 SciFact queries, 20 questions per conversation). " if args.quick else "")
            + "The rerank row ran against the local fake of Voyage's API (tests/fakes/provider_api.py: it scores "
            "the share of the query's words a passage holds): its latency is the client's overhead over a local "
            "socket, its quality figures say nothing about rerank-2-lite, which needs a real key to measure.",
            "## SciFact (5183 abstracts, 300 test queries, 100 hits)\n\n"
            + table(["variant", *next(iter(scifact.values()))], sci_rows),
            f"## LoCoMo development half (997 questions, {HITS} hits)\n\n"
            + table(["variant", *next(iter(locomo.values()))], loc_rows),
            "## Empty answers saying nothing is relevant (LoCoMo indexes, 40 hits)\n\n"
            + table(
                ["min_score", "off-topic (SciFact queries)", "unanswerable (other conversation)", "answerable"],
                off_topic,
            ),
            f"## Rerank overhead\n\nOne rerank of {RERANK_CANDIDATES} SciFact-sized passages against the fake, "
            f"client side (JSON, HTTP on a local socket, parsing): p50 {round_trip:.2f} ms over 200 calls. A real "
            "call adds Voyage's network and model time, which only a real key can measure.",
        ]
    )
    name = f"options-{args.only}" if args.only else "options"
    report(name, "Search options: MMR, recency, min_score, rerank (SciFact + LoCoMo dev)", body)
    save_json(
        name,
        {
            "scifact": scifact,
            "locomo": locomo,
            "rerank_round_trip_ms": round_trip,
            "empty": off_topic,
            "quick": args.quick,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
