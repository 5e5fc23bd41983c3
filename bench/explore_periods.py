"""A query that names a period favours the daily logs of that time (issue 16, goal 1; `server/index/periods.py`).

LoCoMo's questions often say when ("What setback did Melanie face in October 2023?"), and its conversations are
daily logs (`memory/2023-10-13-s17.md`). The product's ranking is replayed (explore_prf.py: fusion over 40
candidates a side, vector feedback, place merging; the query vector as the product makes it, with the names the
conversation shares at half weight) and then `periods.period_order` reorders each question's candidates, with
PERIOD_BOOST varied; tuned on conv-26/30/41, held out conv-42/43. Also printed: the figures over the questions
that name a period, and which questions `named_period` reads a period in.

    .venv/bin/python bench/explore_periods.py

Results: bench/results/periods.md (written by hand from the printed table).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from explore_prf import Data, Params, Ranker, prepare_locomo, product_params, replay_row
from explore_rewrite import without_names

from server.index import periods
from server.index.embeddings.base import normalise
from server.index.embeddings.local import LocalEmbedder
from server.index.fusion import Scored

BOOSTS = (0.05, 0.1, 0.2, 0.5)


class PeriodRanker(Ranker):
    """The product's ranking, then the daily logs of the period the question names moved up."""

    def __init__(self, data: Data, boost: float) -> None:
        super().__init__(data)
        self.boost = boost
        # A chunk's path in the memory folder: the replay's spans put the conversation's name in front.
        self.paths = {row: span[0].split("/", 1)[1] for row, span in enumerate(data.extra["spans"])}  # type: ignore[index]

    def rank(self, q: int, p: Params) -> tuple[list[int], dict[int, float]]:
        ranked, scores = super().rank(q, p)
        period = periods.named_period(self.data.texts[q])
        if self.boost == 0 or period is None:
            return ranked, scores
        order = periods.period_order([Scored(r, scores[r], 0.0, 0.0) for r in ranked], self.paths, period, self.boost)
        return [s.chunk_id for s in order], scores


def main() -> None:
    embedder = LocalEmbedder()
    data = prepare_locomo()
    asked = np.asarray(embedder.embed(data.texts, kind="query"))
    blind = np.asarray(embedder.embed(without_names(data.texts, data.db), kind="query"))
    data = dataclasses.replace(data, queries=normalise(asked + blind))
    named = [q for q, text in enumerate(data.texts) if periods.named_period(text) is not None]
    print(f"{len(named)} of {len(data.texts)} questions name a period, e.g.:")
    for q in named[:: max(1, len(named) // 8)]:
        print(f"  {data.texts[q]!r}: {periods.named_period(data.texts[q])}")
    product = product_params(data)
    base = None
    for boost in (0.0, *BOOSTS):
        ranker = PeriodRanker(data, boost)
        cells, last = replay_row(ranker, product, base)
        base = last if base is None else base
        mine = ranker.each(named, product)
        line = " / ".join(f"{np.mean([s[k] for s in mine]):.3f}" for k in ("r@10", "r@50lines", "r@100lines"))
        print(f"| boost {boost} | {cells} | naming a period: {line} |", flush=True)


if __name__ == "__main__":
    main()
