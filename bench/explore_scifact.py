"""Exploring fusion choices on SciFact from the cached index of bench_retrieval_scifact.py, without re-embedding:
every chunk's vector and every query's full similarity and BM25 lists are kept, and variants are replayed from
them at document level (a document is scored by its best chunk, as the real bench does).

    .venv/bin/python bench/explore_scifact.py
"""

from __future__ import annotations

import json
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from bench_retrieval_scifact import data_folder, doc_of, evaluate, load
from common import CACHE

from server.index.embeddings.base import Embedder
from server.index.embeddings.local import LocalEmbedder
from server.index.fts import match_expression
from server.index.queries import CLEAR_KEYWORD_SCORES, CREATE_KEYWORD_SCORES, FILL_KEYWORD_SCORES
from server.index.store import Store
from server.index.vectors import live_space

PICKLED = CACHE / "explore" / "scifact.pickle"
INDEX = data_folder() / "indexes" / "scifact"


@dataclass
class Lists:
    docs: list[str]  # per chunk row: its document
    sims: dict[str, np.ndarray]  # query id -> similarity per row
    bm25: dict[str, dict[int, float]]  # query id -> row -> bm25 (matching rows only)


def prepare(
    queries: dict[str, str], folder: Path = INDEX, pickled: Path = PICKLED, embedder: Embedder | None = None
) -> Lists:
    """The lists of the index in `folder` (bench_retrieval_scifact.py's unless told), kept in `pickled`."""
    if pickled.exists():
        return pickle.loads(pickled.read_bytes())  # type: ignore[no-any-return]
    embedder = embedder or LocalEmbedder()
    # The store, not the MemoryIndex: opening that may start background work that cuts chunks again.
    store = Store(folder / json.loads((folder / "index.json").read_text()).get("database", "index.sqlite3"))
    db = store.connection()
    space = live_space(store)
    assert space is not None
    vectors = dict(db.execute(f"SELECT chunk_id, embedding FROM {space.table}"))
    paths = db.execute("SELECT c.id, f.path FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY c.id")
    rows = [(chunk, path, vectors[chunk]) for chunk, path in paths]
    row_of = {r[0]: n for n, r in enumerate(rows)}
    matrix = np.stack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
    asked = embedder.embed(list(queries.values()), kind="query")
    lists = Lists([doc_of(r[1]) for r in rows], {}, {})
    db.execute(CREATE_KEYWORD_SCORES)
    for n, (qid, text) in enumerate(queries.items()):
        lists.sims[qid] = (matrix @ asked[n]).astype(np.float32)
        match = match_expression(text)
        bm25: dict[int, float] = {}
        if match:
            db.execute(FILL_KEYWORD_SCORES, (match,))
            bm25 = {row_of[c]: r for c, r in db.execute("SELECT id, rank FROM temp.keyword_scores")}
            db.execute(CLEAR_KEYWORD_SCORES)
        lists.bm25[qid] = bm25
    store.close()
    pickled.parent.mkdir(parents=True, exist_ok=True)
    pickled.write_bytes(pickle.dumps(lists))
    return lists


def product(lists: Lists, qid: str, pool: int = 100, vector_w: float = 0.7) -> list[str]:
    """The engine's hybrid ranking (fusion.py over `pool` candidates a side), documents by best chunk."""
    sims, bm25 = lists.sims[qid], lists.bm25[qid]
    vector_c = np.argsort(-sims, kind="stable")[:pool].tolist()
    keyword_c = sorted(bm25, key=lambda r: bm25[r])[:pool]
    union = sorted(set(vector_c) | set(keyword_c))
    rel = {r: -bm25[r] for r in union if r in bm25}
    best, worst = max(rel.values(), default=0.0), min(rel.values(), default=0.0)
    best_doc: dict[str, float] = {}
    for r in union:
        k = (rel[r] - worst) / (best - worst) if r in rel and best > worst else float(r in rel)
        score = vector_w * max(0.0, float(sims[r])) + (1 - vector_w) * k
        doc = lists.docs[r]
        best_doc[doc] = max(best_doc.get(doc, 0.0), score)
    return sorted(best_doc, key=lambda d: -best_doc[d])


def main() -> None:
    _corpus, queries, qrels = load()
    lists = prepare(queries)
    ranked = {qid: product(lists, qid) for qid in queries}
    ndcg, recall = evaluate(ranked, qrels)
    print(f"product defaults: nDCG@10 {ndcg:.4f} recall@10 {recall:.4f}")


if __name__ == "__main__":
    sys.exit(main())
