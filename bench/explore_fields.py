"""The keyword side's column weights (issue 16, goals 1 and 2): FTS5's bm25() over a chunk's text and its heading
context, weighted 1.0 and 0.5 in the product (`server.index.queries`) since the engine was first written, never
measured. Each weight pair's BM25 lists are read again from the benchmarks' indexes and the product's ranking is
replayed with them (explore_prf.py: fusion over 40 / 100 candidates a side, vector feedback from the best chunk at
0.25, place merging on LoCoMo, documents by best chunk on SciFact), keyword-only and hybrid, tuned on one half
and reported on the other (LoCoMo conv-26/30/41 against conv-42/43, SciFact odd against even query ids).

    .venv/bin/python bench/explore_fields.py [locomo] [scifact] [subset]
"""

from __future__ import annotations

import dataclasses
import sys

import apsw
import numpy as np
from explore_multivec import bootstrap
from explore_prf import Data, Params, Ranker, prepare_locomo, prepare_scifact

from server.index.fts import match_expression

PRODUCT = (1.0, 0.5)
WEIGHTS = [PRODUCT, (1.0, 0.0), (1.0, 0.25), (1.0, 1.0), (1.0, 2.0)]  # the product first: the baseline


def bm25_lists(data: Data, weights: tuple[float, float]) -> list[dict[int, float]]:
    """Every query's BM25 list (row -> bm25) from its own database with these column weights."""
    conns = {db: apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY) for db in data.row_ids}
    out = []
    for text, db in zip(data.texts, data.db, strict=True):
        match = match_expression(text)
        if not match:
            out.append({})
            continue
        rows = conns[db].execute(
            f"SELECT rowid, bm25(chunks_fts, {weights[0]}, {weights[1]}) FROM chunks_fts WHERE chunks_fts MATCH ?",
            (match,),
        )
        row_of = data.row_ids[db]
        out.append({row_of[c]: r for c, r in rows if c in row_of})
    for conn in conns.values():
        conn.close()
    return out


class KeywordRanker(Ranker):
    """The replay with the vector side silent: the fusion's keyword part alone."""

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        return np.zeros(len(self.data.matrix), dtype=np.float32)


def run(which: str) -> None:
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    metrics = ("r@10", "r@50lines", "r@100lines") if which == "locomo" else ("ndcg",)
    groups = {g: [q for q in range(len(data.texts)) if data.group[q] == g] for g in ("tune", "held")}
    pool = 40 if which == "locomo" else 100
    modes = {"hybrid": (Ranker, Params(pool, vk=1, va=0.25, within=True)), "keyword": (KeywordRanker, Params(pool))}
    for mode, (kind, params) in modes.items():
        base: np.ndarray | None = None
        for weights in WEIGHTS:
            ranker = kind(dataclasses.replace(data, bm25=bm25_lists(data, weights)))
            scores = {g: ranker.each(qs, params) for g, qs in groups.items()}
            cells = []
            for metric in metrics:
                every = scores["tune"] + scores["held"]
                cells.append(
                    f"{metric} {np.mean([s[metric] for s in scores['tune']]):.3f}"
                    f" / {np.mean([s[metric] for s in scores['held']]):.3f} / {np.mean([s[metric] for s in every]):.3f}"
                )
            held = np.asarray([s[metrics[-1]] for s in scores["held"]])
            if weights == PRODUCT:
                base = held
            low, high = bootstrap(held - base) if base is not None else (0.0, 0.0)
            delta = f"held {metrics[-1]} delta {low:+.3f}..{high:+.3f}"
            label = f"text {weights[0]}, heading {weights[1]}"
            print(f"| {which} | {mode} | {label} | " + " | ".join(cells) + f" | {delta} |", flush=True)


def main() -> None:
    for which in sys.argv[1:] or ["locomo", "scifact"]:
        run(which)


if __name__ == "__main__":
    main()
