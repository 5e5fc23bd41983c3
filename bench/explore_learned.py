"""Exploring a learned fusion on SciFact and LoCoMo-dev: is there a better combination of the signals the engine
already has than 0.7 x cosine + 0.3 x min-max BM25?

The product's ranking (explore_prf.py's replay, vector feedback included) gives each question its candidates;
each candidate gets features from what a search knows: its cosine, its BM25 (min-max, max-normalised, matched or
not), both ranks, its gap to the best cosine, the product of the two scores and its length. A linear model is fitted
on pairs (a relevant candidate against an irrelevant one of the same question: RankNet's pairwise logistic loss) of
the tuning halves of both sets together, and reported on the held-out halves (SciFact's even query ids,
LoCoMo's conv-42/43), against the product's fusion, which is one point of the same family.

`ceiling`: where the evidence the product misses stands in each list. LoCoMo: each evidence turn outside the first
50 lines of hits, by its best chunk's rank in the vector list, the BM25 list (the fusion sees the first 40 of each)
and the fused list; SciFact: each relevant abstract outside the first 10 documents, by its best chunk's ranks (100
of each list fused). What is outside both candidate lists, no fusion or reordering can bring back.

    .venv/bin/python bench/explore_learned.py [ceiling]
"""

from __future__ import annotations

import sys

import numpy as np
from explore_prf import (
    Data,
    Params,
    Ranker,
    locomo_hits,
    prepare_locomo,
    prepare_scifact,
    product_params,
    replay_row,
)
from sklearn.linear_model import LogisticRegression

NAMES = (
    *("cos", "bm25 minmax", "matched", "cos gap"),
    *("1/vector rank", "1/keyword rank", "bm25/max", "cos*bm25", "log len"),
)


class Learned(Ranker):
    """The replay, its candidates ordered by a linear model over their features (None: the product's order)."""

    def __init__(self, data: Data) -> None:
        super().__init__(data)
        self.weights: np.ndarray | None = None
        self.mean = np.zeros(len(NAMES))
        self.scale = np.ones(len(NAMES))
        self.last: np.ndarray = np.zeros(0)
        self.length = np.log1p(np.asarray([len(t) for t in data.chunk_text], dtype=np.float64))
        self.length -= np.median(self.length)

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        self.last = super().similarities(vector)  # the last call of a ranking: the similarities fused last
        return self.last

    def features(self, q: int, p: Params) -> tuple[list[int], np.ndarray]:
        _ranked, scores = super().rank(q, p)
        rows = list(scores)
        sims = np.maximum(0.0, self.last[rows])
        bm25 = self.data.bm25[q]
        raw = np.asarray([-bm25[r] if r in bm25 else 0.0 for r in rows])
        matched = np.asarray([r in bm25 for r in rows], dtype=np.float64)
        best, worst = raw[matched > 0].max(initial=0.0), raw[matched > 0].min(initial=0.0)
        minmax = np.where(matched > 0, (raw - worst) / (best - worst) if best > worst else 1.0, 0.0)
        vrank = np.empty(len(rows))
        vrank[np.argsort(-sims)] = np.arange(len(rows))
        krank = np.empty(len(rows))
        krank[np.argsort(-raw)] = np.arange(len(rows))
        x = np.stack(
            [
                sims,
                minmax,
                matched,
                sims - sims.max(),
                1 / (1 + vrank),
                np.where(matched > 0, 1 / (1 + krank), 0.0),
                raw / best if best > 0 else raw * 0,
                sims * minmax,
                self.length[rows],
            ],
            axis=1,
        )
        return rows, x

    def rank(self, q: int, p: Params) -> tuple[list[int], dict[int, float]]:
        if self.weights is None:
            return super().rank(q, p)
        rows, x = self.features(q, p)
        s = ((x - self.mean) / self.scale) @ self.weights
        scores = {r: float(v) for r, v in zip(rows, s, strict=True)}
        return sorted(scores, key=lambda r: (-scores[r], r)), scores

    def relevant(self, q: int, rows: list[int]) -> np.ndarray:
        extra = self.data.extra
        if self.data.name == "locomo":
            places = [extra["turns"][t] for t in extra["wanted"][q] if t in extra["turns"]]  # type: ignore[index]
            holding = {r for path, line in places for r in _rows_holding(self.data, path, line)}
            return np.asarray([r in holding for r in rows])
        docs, qid = extra["docs"], extra["qids"][q]  # type: ignore[index]
        wanted = {d for d, rel in extra["qrels"][qid].items() if rel > 0}  # type: ignore[index]
        return np.asarray([docs[r] in wanted for r in rows])


def pairs(ranker: Learned, p: Params) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per tuning question with a relevant and an irrelevant candidate: the features and relevance."""
    xs, ys = [], []
    for q in range(len(ranker.data.texts)):
        if ranker.data.group[q] != "tune":
            continue
        rows, x = ranker.features(q, p)
        y = ranker.relevant(q, rows)
        if y.any() and not y.all():
            xs.append(x)
            ys.append(y)
    return xs, ys


def fit(sets: list[tuple[list[np.ndarray], list[np.ndarray]]], c: float, use: list[int]) -> tuple:
    """RankNet's pairwise logistic model over the chosen features; every set weighs the same in the loss."""
    every = np.concatenate([x for xs, _ in sets for x in xs])[:, use]
    mean, scale = every.mean(axis=0), every.std(axis=0) + 1e-9
    diffs, weights = [], []
    for xs, ys in sets:
        chunk = []
        for x, y in zip(xs, ys, strict=True):
            z = (x[:, use] - mean) / scale
            pos, neg = z[y], z[~y]
            chunk.append((pos[:, None, :] - neg[None, :, :]).reshape(-1, len(use)))
        d = np.concatenate(chunk)
        diffs.append(d)
        weights.append(np.full(len(d), 1.0 / len(d)))
    d, w = np.concatenate(diffs), np.concatenate(weights)
    x = np.concatenate([d, -d])
    y = np.concatenate([np.ones(len(d)), np.zeros(len(d))])
    model = LogisticRegression(C=c, fit_intercept=False, max_iter=2000)
    model.fit(x, y, sample_weight=np.concatenate([w, w]) * len(d))
    return model.coef_[0], mean, scale


def _rows_holding(data: Data, path: str, line: int) -> list[int]:
    """The LoCoMo chunk rows whose lines hold line `line` of `path`."""
    spans = data.extra["spans"]  # type: ignore[index]
    return [r for r, (p, start, end) in enumerate(spans) if p == path and start <= line <= end]


def _best(ranks: dict[int, int], rows: list[int]) -> int:
    return min((ranks[r] for r in rows if r in ranks), default=len(ranks) + 1_000_000)


def ceiling() -> None:
    """Print where the missed evidence stands (see the module docstring)."""
    for data in (prepare_locomo(), prepare_scifact()):
        ranker = Ranker(data)
        p = product_params(data)
        missed: list[tuple[int, int, int]] = []  # (vector rank, bm25 rank, fused rank) per missed item
        found = 0
        for q in range(len(data.texts)):
            ranked, _scores = ranker.rank(q, p)
            allowed = ranker.allowed[data.db[q]]
            sims = data.matrix @ data.queries[q]
            order = np.argsort(-(sims if allowed is None else np.where(allowed, sims, -np.inf)))
            own = len(sims) if allowed is None else int(allowed.sum())
            vrank = {int(r): n for n, r in enumerate(order[:own])}
            krank = {r: n for n, r in enumerate(sorted(data.bm25[q], key=lambda r: data.bm25[q][r]))}
            frank = {r: n for n, r in enumerate(ranked)}
            for rows, got in _evidence(ranker, q, ranked):
                if got:
                    found += 1
                else:
                    missed.append((_best(vrank, rows), _best(krank, rows), _best(frank, rows)))
        pool = p.pool
        outside = sum(v >= pool and k >= pool for v, k, _ in missed)
        print(f"{data.name}: {found} found, {len(missed)} missed, {outside} of them outside both {pool}-long lists")
        for n, label in enumerate(("vector", "bm25", "fused")):
            ranks = np.asarray([m[n] for m in missed])
            cuts = ", ".join(f"<{c}: {(ranks < c).sum()}" for c in (10, 20, pool))
            print(f"  {label} rank of the best chunk: median {np.median(ranks):.0f}; {cuts}")


def _evidence(ranker: Ranker, q: int, ranked: list[int]) -> list[tuple[list[int], bool]]:
    """Each wanted item of question q: the rows holding it and whether the product's answer has it (LoCoMo: an
    evidence turn in the first 50 lines of hits; SciFact: a relevant abstract in the first 10 documents)."""
    data = ranker.data
    extra = data.extra
    if data.name == "locomo":
        from bench_locomo import covers, within_lines

        read = within_lines(locomo_hits(data, ranked), 50)
        places = [extra["turns"][t] for t in extra["wanted"][q] if t in extra["turns"]]  # type: ignore[index]
        return [(_rows_holding(data, path, line), covers(read, path, line)) for path, line in places]
    docs, qid = extra["docs"], extra["qids"][q]  # type: ignore[index]
    top: list[str] = []
    for r in ranked:
        if docs[r] not in top:
            top.append(docs[r])
    return [
        ([r for r in range(len(docs)) if docs[r] == doc], doc in top[:10])
        for doc, rel in extra["qrels"][qid].items()  # type: ignore[index]
        if rel > 0
    ]


def main() -> None:
    if sys.argv[1:] == ["ceiling"]:
        return ceiling()
    rankers = {name: Learned(data) for name, data in (("locomo", prepare_locomo()), ("scifact", prepare_scifact()))}
    params = {name: product_params(r.data) for name, r in rankers.items()}
    base = {}
    for name, ranker in rankers.items():
        line, base[name] = replay_row(ranker, params[name], None)
        print(f"{name} product: {line}", flush=True)
    sets = {name: pairs(r, params[name]) for name, r in rankers.items()}
    every = list(range(len(NAMES)))
    choices = {"cos+bm25": [0, 1], "all": every, "no length": every[:-1], "scores+ranks": [0, 1, 4, 5]}
    for label, use in choices.items():
        for c in (0.01, 1.0):
            weights, mean, scale = fit(list(sets.values()), c, use)
            full = np.zeros(len(NAMES))
            full[use] = weights
            m, s = np.zeros(len(NAMES)), np.ones(len(NAMES))
            m[use], s[use] = mean, scale
            shown = ", ".join(f"{NAMES[i]} {weights[n] / s[i]:+.2f}" for n, i in enumerate(use))
            print(f"{label} C={c}: {shown}", flush=True)
            for name, ranker in rankers.items():
                ranker.weights, ranker.mean, ranker.scale = full, m, s
                line, _ = replay_row(ranker, params[name], base[name])
                ranker.weights = None
                print(f"  {name}: {line}", flush=True)


if __name__ == "__main__":
    main()
