"""Exploring the keyword side's BM25, replayed without re-embedding (issue 16, goals 1 and 2).

1. k1 and b. FTS5's bm25() fixes k1 = 1.2 and b = 0.75 (PostgreSQL's keyword side copies them,
   server/postgres/search_queries.py); neither was ever measured here. This computes FTS5's own formula (weighted
   column counts, the row's length over all columns against the mean, idf ln((N - n + 0.5) / (n + 0.5)) floored at
   1e-6) from the cached indexes' tokens (FTS5's porter tokenizer, through apsw) for any k1 and b, counts the
   queries whose lists come out as FTS5's own at the product's k1 and b, and replays the product's ranking with each
   pair's lists.
2. How BM25 enters the fusion. The product min-max normalises it over the candidates, so the best keyword match
   always brings the full keyword weight, however few of the query's words it holds. Against a query's "ideal"
   score (the sum of its words' idf: each word once in a chunk of mean length): `abs` scores each candidate's BM25
   as a share of the ideal (capped at 1), `mix` keeps min-max but scales it by the best match's share of the ideal.

The replay is explore_prf.py's (fusion, vector feedback, places). Cells are tuning half / held-out half / all,
then the held-out difference from the product's figures (a 95% paired bootstrap).

    .venv/bin/python bench/explore_bm25.py [scifact] [subset] [locomo]
"""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict

import apsw
import numpy as np
from explore_prf import Data, Ranker, fuse, prepare_locomo, prepare_scifact, product_params, replay_row

from server.index.fts import query_terms

WEIGHTS = (1.0, 0.5)  # the product's column weights: text, heading (server/index/queries.py)
GRID = [(1.2, 0.75), (0.9, 0.4), (1.2, 0.5), (1.2, 0.3), (1.5, 0.75), (0.9, 0.75), (2.0, 0.75), (1.2, 0.9)]
NORMS = [("abs", 1.0), ("abs", 0.7), ("abs", 0.5), ("mix", 1.0), ("mix", 0.7), ("mix", 0.5)]  # (way, share of ideal)


class Tokens:
    """FTS5's porter tokenizer, as the index's chunks_fts is declared."""

    def __init__(self) -> None:
        self.tokenize = apsw.Connection(":memory:").fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])

    def __call__(self, text: str, flags: int = apsw.FTS5_TOKENIZE_DOCUMENT) -> list[str]:
        return [t[2] for t in self.tokenize(text.encode("utf-8"), flags, None)]


class Statistics:
    """Per database: each row's token counts per column, its length over all columns, and the mean length."""

    def __init__(self, data: Data, tokens: Tokens) -> None:
        self.postings: dict[str, dict[str, dict[int, list[int]]]] = {}  # db -> token -> row -> count per column
        self.length: dict[int, int] = {}
        self.mean: dict[str, float] = {}
        self.rows: dict[str, int] = {}
        for db, row_of in data.row_ids.items():
            connection = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
            postings: dict[str, dict[int, list[int]]] = defaultdict(dict)
            total = 0
            for chunk_id, text, heading in connection.execute("SELECT id, text, heading FROM chunks"):
                if chunk_id not in row_of:
                    continue
                row = row_of[chunk_id]
                size = 0
                for column, value in enumerate((text, heading)):
                    words = tokens(value or "")
                    size += len(words)
                    for word, count in Counter(words).items():
                        postings[word].setdefault(row, [0, 0])[column] += count
                self.length[row] = size
                total += size
            connection.close()
            self.postings[db], self.rows[db] = postings, len(row_of)
            self.mean[db] = total / max(1, len(row_of))

    def bm25(self, db: str, words: list[str], k1: float, b: float) -> dict[int, float]:
        """FTS5's bm25() of every row matching any of `words` (negative: lower is better)."""
        postings, n, mean = self.postings[db], self.rows[db], self.mean[db]
        scores: dict[int, float] = defaultdict(float)
        for word in words:  # two words of one stem ("cells", "cell") are two phrases, counted twice as FTS5 does
            rows = postings.get(word, {})
            idf = math.log((n - len(rows) + 0.5) / (len(rows) + 0.5))
            idf = idf if idf > 0 else 1e-6
            for row, counts in rows.items():
                tf = WEIGHTS[0] * counts[0] + WEIGHTS[1] * counts[1]
                scores[row] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.length[row] / mean))
        return {row: -score for row, score in scores.items()}


class IdealRanker(Ranker):
    """The product's replay with BM25 measured against each query's ideal score instead of min-max alone."""

    def __init__(self, data: Data, ideal: list[float], way: str, share: float) -> None:
        super().__init__(data)
        self.ideal, self.way, self.share = ideal, way, share

    def fuse(self, q: int, sims: np.ndarray, bm25: dict[int, float], pool: int, allowed: np.ndarray | None,
             vw: float) -> tuple[list[int], dict[int, float]]:  # fmt: skip
        _ranked, fused = fuse(sims, bm25, pool, allowed, vw)  # the product's candidates and scores
        ideal = self.ideal[q] * self.share
        best = max((-bm25[r] for r in fused if r in bm25), default=0.0)
        scores = {}
        for r, score in fused.items():
            vector = vw * max(0.0, float(sims[r]))
            if self.way == "abs":
                scores[r] = vector + (1 - vw) * (min(1.0, -bm25.get(r, 0.0) / ideal) if ideal > 0 else 0.0)
            else:
                scores[r] = vector + (score - vector) * (min(1.0, best / ideal) if ideal > 0 else 1.0)
        return sorted(scores, key=lambda r: (-scores[r], r)), scores


def ideal_scores(stats: Statistics, data: Data, words: list[list[str]]) -> list[float]:
    """Each query's words' idf, summed."""
    ideal = []
    for q in range(len(data.texts)):
        postings, n = stats.postings[data.db[q]], stats.rows[data.db[q]]
        found = (len(postings.get(word, {})) for word in words[q])
        ideal.append(sum(max(1e-6, math.log((n - m + 0.5) / (m + 0.5))) for m in found))
    return ideal


def query_words(tokens: Tokens, text: str) -> list[str]:
    """The tokens of the product's MATCH terms, one phrase each (a term FTS5 cuts in two counts as two here)."""
    return [word for term in query_terms(text) for word in tokens(term, apsw.FTS5_TOKENIZE_QUERY)]


def main() -> None:
    which = sys.argv[1:] or ["scifact", "subset", "locomo"]
    tokens = Tokens()
    print("| set | k1, b or normalisation | figures (tune / held / all) | | | held-out delta |")
    print("|---|---|---|---|---|---|")
    for name in which:
        data = prepare_locomo() if name == "locomo" else prepare_scifact(name == "subset")
        stats = Statistics(data, tokens)
        words = [query_words(tokens, text) for text in data.texts]
        own = data.bm25
        mine = [stats.bm25(data.db[q], words[q], 1.2, 0.75) for q in range(len(data.texts))]
        same = sum(
            set(a) == set(b) and all(abs(a[r] - b[r]) < 1e-6 * max(1.0, abs(a[r])) for r in a)
            for a, b in zip(own, mine, strict=True)
        )
        print(f"<!-- {name}: {same} of {len(own)} queries' lists equal FTS5's own at k1 1.2, b 0.75 -->", flush=True)
        ranker = Ranker(data)
        params = product_params(data)
        row, base = replay_row(ranker, params, None)
        print(f"| {name} | FTS5's own | {row} |", flush=True)
        for k1, b in GRID:
            data.bm25 = [stats.bm25(data.db[q], words[q], k1, b) for q in range(len(data.texts))]
            ranker = Ranker(data)
            row, _ = replay_row(ranker, params, base)
            print(f"| {name} | {k1}, {b} | {row} |", flush=True)
        data.bm25 = own
        ideal = ideal_scores(stats, data, words)
        for way, share in NORMS:
            row, _ = replay_row(IdealRanker(data, ideal, way, share), params, base)
            print(f"| {name} | BM25 {way}, {share} of the ideal | {row} |", flush=True)


if __name__ == "__main__":
    main()
