"""The keyword side's column weights (issue 16, goals 1 and 2): FTS5's bm25() over a chunk's text and its heading
context, weighted 1.0 and 0.5 in the product (`server.index.queries`) since the engine was first written, never
measured. Each weight pair's BM25 lists are read again from the benchmarks' indexes and the product's ranking is
replayed with them (explore_prf.py: fusion over 40 / 100 candidates a side, vector feedback from the best chunk at
0.25, place merging on LoCoMo, documents by best chunk on SciFact), keyword-only and hybrid, tuned on one half
and reported on the other (LoCoMo conv-26/30/41 against conv-42/43, SciFact odd against even query ids).
`--neighbours` replays instead a chunk's keyword score raised by w times its better neighbour's (same file), so a
chunk next to the words can be found by them, hybrid only. `--proximity` replays a chunk's keyword score plus w
times the BM25 of the query's neighbouring word pairs found close together in it (a sequential dependence model:
each pair as an FTS5 phrase, or within N tokens by NEAR), keyword-only and hybrid.

    .venv/bin/python bench/explore_fields.py [locomo] [scifact] [subset] [--neighbours | --proximity]
"""

from __future__ import annotations

import dataclasses
import itertools
import sys

import apsw
import numpy as np
from explore_multivec import chunks_of
from explore_prf import Data, Params, Ranker, prepare_locomo, prepare_scifact, product_params, replay_row

from server.index.fts import match_expression, query_terms

PRODUCT = (1.0, 0.5)
WEIGHTS = [PRODUCT, (1.0, 0.0), (1.0, 0.25), (1.0, 1.0), (1.0, 2.0)]  # the product first: the baseline


def bm25_lists(data: Data, weights: tuple[float, float], matcher=match_expression) -> list[dict[int, float]]:  # type: ignore[no-untyped-def]
    """Every query's BM25 list (row -> bm25) from its own database with these column weights, for the MATCH
    expression `matcher` makes of its text."""
    conns = {db: apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY) for db in data.row_ids}
    out = []
    for text, db in zip(data.texts, data.db, strict=True):
        match = matcher(text)
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


def smoothed(data: Data, w: float) -> list[dict[int, float]]:
    """Each BM25 list with a chunk's score (as a positive number) plus w times its better neighbour's."""
    chunks = chunks_of(data)
    out = []
    for listed in data.bm25:
        own = {r: -v for r, v in listed.items()}
        rows = set(own) | {n for r in own for n in (chunks.prev[r], chunks.next[r]) if n >= 0}
        scores = {}
        for r in rows:
            near = [own.get(n, 0.0) for n in (chunks.prev[r], chunks.next[r]) if n >= 0]
            scores[r] = -(own.get(r, 0.0) + w * max(near, default=0.0))
        out.append({r: v for r, v in scores.items() if v < 0})
    return out


def pairs_expression(text: str, near: int) -> str | None:
    """The query's neighbouring word pairs (stopwords dropped) as FTS5 phrases (`near` 0) or NEAR groups."""
    terms = query_terms(text)
    pairs = list(itertools.pairwise(terms))
    if not pairs:
        return None
    if near == 0:
        return " OR ".join(f'"{a} {b}"' for a, b in pairs)
    return " OR ".join(f'NEAR("{a}" "{b}", {near})' for a, b in pairs)


def with_proximity(data: Data, near: int, w: float) -> list[dict[int, float]]:
    """Each BM25 list plus w times the pairs' BM25 (both negative: lower is better)."""
    pairs = bm25_lists(data, PRODUCT, lambda text: pairs_expression(text, near))
    return [
        {r: v + w * close.get(r, 0.0) for r, v in listed.items()}
        for listed, close in zip(data.bm25, pairs, strict=True)
    ]


class KeywordRanker(Ranker):
    """The replay with the vector side silent: the fusion's keyword part alone."""

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        return np.zeros(len(self.data.matrix), dtype=np.float32)


def run(which: str, neighbours: bool = False, proximity: bool = False) -> None:
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    product = product_params(data)
    modes = {"hybrid": (Ranker, product), "keyword": (KeywordRanker, Params(product.pool))}
    if neighbours:
        variants = {f"neighbours {w}": (lambda w=w: smoothed(data, w)) for w in (0.0, 0.1, 0.2, 0.35, 0.5)}
        modes = {"hybrid": modes["hybrid"]}
    elif proximity:
        variants = {"terms alone": lambda: data.bm25}
        for near, w in ((0, 0.25), (0, 0.5), (0, 1.0), (4, 0.25), (4, 0.5), (4, 1.0), (8, 0.5)):
            label = f"{'phrase' if near == 0 else f'NEAR {near}'} x {w}"
            variants[label] = lambda near=near, w=w: with_proximity(data, near, w)
    else:
        variants = {f"text {a}, heading {b}": (lambda a=a, b=b: bm25_lists(data, (a, b))) for a, b in WEIGHTS}
    for mode, (kind, params) in modes.items():
        base: np.ndarray | None = None
        for label, lists in variants.items():  # the product's first: the baseline
            cells, held = replay_row(kind(dataclasses.replace(data, bm25=lists())), params, base)
            base = held if base is None else base
            print(f"| {which} | {mode} | {label} | {cells} |", flush=True)


def main() -> None:
    sets = [a for a in sys.argv[1:] if not a.startswith("--")]
    for which in sets or ["locomo", "scifact"]:
        run(which, "--neighbours" in sys.argv, "--proximity" in sys.argv)


if __name__ == "__main__":
    main()
