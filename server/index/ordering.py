"""What reorders the fused candidates, in this order: the recency boost for daily logs (`recency.py`), the daily
logs of a period the query names first (`periods.py`), reranking (`rerank.py`), then MMR diversity (`mmr.py`).
Each is an option off unless asked for, but the period's, which follows the query."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from server.index.errors import EmbeddingError, InvalidArgumentError
from server.index.fusion import Scored
from server.index.hits import RowsOf, VectorsOf
from server.index.mmr import MMR_POOL, mmr_order
from server.index.periods import named_period, period_order
from server.index.places import Span
from server.index.recency import boost_recent
from server.index.rerank import RERANK_CANDIDATES, Reranker, rerank_order
from server.index.tuning import MAX_HALF_LIFE_DAYS

log = logging.getLogger(__name__)

NO_RERANKER = "reranking is not configured on this server (it needs VOYAGE_API_KEY); hits are in search order"


def reorder(
    rows: RowsOf,
    vectors: VectorsOf | None,
    query: str,
    scored: list[Scored],
    spans: Sequence[Span],
    *,
    mmr_lambda: float,
    half_life_days: float,
    rerank: bool,
    reranker: Reranker | None,
    today: dt.date,
) -> tuple[list[Scored], list[Span], str | None]:
    """The candidates' scores (changed by the recency boost only) and their spans in the order to show them, with
    a notice when reranking was asked for and could not run."""
    where = {span.chunk_id: span for span in spans}
    paths = {chunk: span.path for chunk, span in where.items()}
    if half_life_days > 0:
        scored = boost_recent(scored, paths, today, half_life_days)
    order = [s.chunk_id for s in period_order(scored, paths, named_period(query)) if s.chunk_id in where]
    relevance = {s.chunk_id: s.score for s in scored}
    pool = len(order)  # the candidates MMR reorders: all, or the reranked ones
    notice = None
    if rerank and reranker is None:
        notice = NO_RERANKER
    elif rerank and reranker is not None and order:
        head = order[:RERANK_CANDIDATES]
        texts = {row[0]: f"{row[6]}\n{row[7]}" if row[6] else row[7] for row in rows(head)}
        try:
            scores = reranker.rerank(query, [texts.get(chunk, "") for chunk in head])
        except EmbeddingError as exc:
            log.warning("rerank failed: %s", exc)
            notice = f"reranking is unavailable right now ({exc}); hits are in search order"
        else:
            order, pool = rerank_order(order, scores), len(head)
            relevance = dict(zip(head, scores, strict=True))
    pool = min(pool, MMR_POOL)
    if mmr_lambda < 1 and vectors is not None and pool > 2:
        order = mmr_order(order[:pool], relevance, vectors(order[:pool]), mmr_lambda) + order[pool:]
    return scored, [where[chunk] for chunk in order], notice


def check_reordering(mmr_lambda: object, half_life_days: object, rerank: object) -> None:
    """The reordering options' checks (InvalidArgumentError), shared with the settings that give their defaults."""
    if isinstance(mmr_lambda, bool) or not isinstance(mmr_lambda, int | float) or not 0 <= mmr_lambda <= 1:
        raise InvalidArgumentError("mmr_lambda must be a number from 0 to 1 (1: no diversity)")
    if (
        isinstance(half_life_days, bool)
        or not isinstance(half_life_days, int | float)
        or not 0 <= half_life_days <= MAX_HALF_LIFE_DAYS
    ):
        raise InvalidArgumentError(f"recency_half_life_days must be a number from 0 (off) to {MAX_HALF_LIFE_DAYS}")
    if not isinstance(rerank, bool):
        raise InvalidArgumentError("rerank must be true or false")


def nothing_relevant(min_score: float) -> str:
    """The notice of an empty answer that a threshold made empty: memory holds nothing relevant enough."""
    return (
        f"nothing relevant: no passage scored min_score {min_score:g} or more, so memory holds no good answer to "
        "this query (min_score 0 shows the closest matches anyway)"
    )
