"""Exploring ranking choices on LoCoMo-dev without re-embedding: each conversation is indexed once (in process,
default settings, under bench/.cache/explore/), every chunk's vector and every question's full similarity and
BM25 lists are kept, and variants of the candidate pools, fusion and place merging are replayed from them.
What wins here is then confirmed through the real CLI with bench_locomo.py.

    .venv/bin/python bench/explore_locomo.py
"""

from __future__ import annotations

import json
import pickle
import sys
from dataclasses import dataclass

import numpy as np
from bench_locomo import LOCOMO, build, recall_of, write_folder
from common import CACHE

from server.index.embeddings.base import Embedder
from server.index.embeddings.local import LocalEmbedder
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.fts import match_expression
from server.index.queries import CLEAR_KEYWORD_SCORES, CREATE_KEYWORD_SCORES, FILL_KEYWORD_SCORES

WORK = CACHE / "explore"


@dataclass
class Case:
    conversation: str
    wanted: set[str]
    sims: np.ndarray  # per chunk row
    bm25: dict[int, float]  # row -> bm25 (negative, lower is better), matching rows only


@dataclass
class Corpus:
    ids: list[int]
    spans: list[tuple[str, int, int]]  # per row: path, start, end
    turns: dict[str, tuple[str, int]]


def prepare(
    variant: str = "defaults", settings: EngineSettings | None = None, embedder: Embedder | None = None
) -> tuple[dict[str, Corpus], list[Case]]:
    """Index every conversation under `variant` (engine `settings`, the defaults when None) and keep the lists."""
    work = WORK / variant
    pickled = work / "cases.pickle"
    if pickled.exists():
        return pickle.loads(pickled.read_bytes())  # type: ignore[no-any-return]
    embedder = embedder or LocalEmbedder()
    samples = json.loads((LOCOMO / "locomo-dev.json").read_text())
    corpora, cases = {}, []
    for sample in samples:
        conversation = build(sample)
        folder = write_folder(conversation, WORK / "folders")
        index = MemoryIndex.open(work / "data", conversation.name, embedder, create=True, settings=settings)
        index.index(folder)
        db = index.store.connection()
        rows = list(
            db.execute(
                "SELECT c.id, f.path, c.start_line, c.end_line, e.vector FROM chunks c JOIN files f ON f.id = c.file_id"
                " JOIN embedding_cache e ON e.hash = c.hash ORDER BY c.id"
            )
        )
        ids = [r[0] for r in rows]
        row_of = {chunk: n for n, chunk in enumerate(ids)}
        matrix = np.stack([np.frombuffer(r[4], dtype=np.float32) for r in rows])
        corpora[conversation.name] = Corpus(ids, [(r[1], r[2], r[3]) for r in rows], conversation.turns)
        questions = [q for q, _ in conversation.questions]
        queries = embedder.embed(questions, kind="query")
        db.execute(CREATE_KEYWORD_SCORES)
        for n, (question, wanted) in enumerate(conversation.questions):
            bm25: dict[int, float] = {}
            match = match_expression(question)
            if match:
                db.execute(FILL_KEYWORD_SCORES, (match,))
                bm25 = {row_of[c]: r for c, r in db.execute("SELECT id, rank FROM temp.keyword_scores")}
                db.execute(CLEAR_KEYWORD_SCORES)
            cases.append(Case(conversation.name, wanted, matrix @ queries[n], bm25))
        index.close()
        print(conversation.name, len(ids), "chunks", flush=True)
    pickled.write_bytes(pickle.dumps((corpora, cases)))
    return corpora, cases


def hits_of(ranked_rows: list[int], corpus: Corpus, limit: int, merge: bool = True) -> list[dict]:
    """server.index.places.merge_places over rows in rank order, as hit dicts."""
    from server.index.places import Span, merge_places

    spans = [Span(row, *corpus.spans[row]) for row in ranked_rows]
    if not merge:
        return [{"path": s.path, "start_line": s.start_line, "end_line": s.end_line} for s in spans[:limit]]
    return [{"path": p.path, "start_line": p.start_line, "end_line": p.end_line} for p in merge_places(spans, limit)]


def fused_rows(case: Case, pool: int, vector_w: float, norm: str = "minmax") -> list[int]:
    """The product's fusion (search.py + fusion.py) over the full lists: `pool` candidates a side."""
    sims = case.sims
    vector_c = list(np.argsort(-sims, kind="stable")[:pool])
    keyword_c = sorted(case.bm25, key=lambda r: case.bm25[r])[:pool]
    union = set(vector_c) | set(keyword_c)
    ranks = {r: case.bm25[r] for r in union if r in case.bm25}
    rel = {r: -v for r, v in ranks.items()}
    best = max(rel.values(), default=0.0)
    worst = min(rel.values(), default=0.0) if norm == "minmax" else 0.0
    scores = {}
    for r in union:
        k = 0.0
        if r in rel and best > worst:
            k = (rel[r] - worst) / (best - worst)
        elif r in rel:
            k = 1.0
        scores[r] = vector_w * max(0.0, float(sims[r])) + (1 - vector_w) * k
    return sorted(scores, key=lambda r: (-scores[r], r))


def evaluate(corpora: dict[str, Corpus], cases: list[Case], rank, limit: int = 40, merge: bool = True) -> dict:
    totals: dict[str, float] = {}
    for case in cases:
        corpus = corpora[case.conversation]
        hits = hits_of(rank(case), corpus, limit, merge)
        for key, value in recall_of(hits, case.wanted, corpus.turns).items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: round(value / len(cases), 4) for key, value in totals.items()}


def main() -> None:
    corpora, cases = prepare()
    print(len(cases), "questions")
    for pool in (160, 40):  # the pools of 40 hits with candidate multiplier 4 (before) and 1 (now)
        print(f"pool {pool}:", evaluate(corpora, cases, lambda c, pool=pool: fused_rows(c, pool, 0.7)))


if __name__ == "__main__":
    sys.exit(main())
