"""Hybrid search: vector KNN and BM25 candidates, completed on both sides, fused, filtered and cited."""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import apsw
import numpy as np

from server.index.binary import nearest
from server.index.common_terms import keyword_match, query_texts
from server.index.embeddings.base import Embedder, normalise
from server.index.errors import EmbeddingError, InvalidArgumentError
from server.index.feedback import feedback_similarities
from server.index.filtered import chunk_vectors, filtered_similarities, similarities_of
from server.index.fts import query_terms
from server.index.fusion import FusionWeights, fuse
from server.index.hits import Hit, Retrievers, RowsOf, SearchResult, VectorsOf, join_notices, load_hits, spans_of
from server.index.labels import labels_argument
from server.index.ordering import check_reordering, nothing_relevant, reorder
from server.index.places import merge_places
from server.index.queries import (
    CLEAR_KEYWORD_SCORES,
    CREATE_KEYWORD_SCORES,
    FILL_KEYWORD_SCORES,
    Filters,
    hits_sql,
    keyword_best_sql,
    keyword_scores_of_sql,
    spans_sql,
)
from server.index.rerank import Reranker
from server.index.store import Store
from server.index.tuning import SearchDefaults, default_min_score
from server.index.vectors import VectorSpace

log = logging.getLogger(__name__)

Mode = Literal["auto", "hybrid", "vector", "keyword"]
SOURCES = ("memory", "sessions")
MAX_LIMIT = 100
MAX_QUERY_CHARS = 2000
CANDIDATE_MULTIPLIER = 1  # tuning.SearchDefaults.candidate_multiplier
MIN_CANDIDATES = 40
KEYWORD_WAIT_SECONDS = 120.0  # the keyword side waits this long at most for the vector candidates
DEFAULTS = SearchDefaults()
# Shared by every index in the process; each thread keeps its own connection per index (see Store).
_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="keyword-search")


@dataclass(frozen=True)
class SearchOptions:
    limit: int = 8
    min_score: float | None = None  # None (auto): tuning.default_min_score gates the best hit; else every hit
    filters: Filters = field(default_factory=Filters)
    mode: Mode = "auto"
    mmr_lambda: float = 1.0  # 1: relevance order; lower: more variety (server.index.mmr)
    recency_half_life_days: float = 0.0  # 0: off; else daily logs' scores halve per this many days of age
    rerank: bool = False  # the best candidates reordered by the configured reranker (server.index.rerank)
    feedback_weight: float = DEFAULTS.feedback_weight  # hybrid: the best hit's share of the query (index.feedback)


def build_options(
    *,
    defaults: SearchDefaults = DEFAULTS,
    limit: int | None = None,
    min_score: float | None = None,
    sources: list[str] | tuple[str, ...] | None = None,
    path_prefix: str | None = None,
    date_from: str | None = None,
    date_to: str | None = None,
    mode: str = "auto",
    tags: list[str] | None = None,
    category: str | None = None,
    mmr_lambda: float | None = None,
    recency_half_life_days: float | None = None,
    rerank: bool | None = None,
    feedback_weight: float | None = None,
) -> SearchOptions:
    """Validate user-supplied search arguments into options, `defaults` (the configured ones) for those not given;
    every problem is an InvalidArgumentError."""
    limit = defaults.max_results if limit is None else limit
    min_score = defaults.min_score if min_score is None else min_score
    mmr_lambda = defaults.mmr_lambda if mmr_lambda is None else mmr_lambda
    half_life = defaults.recency_half_life_days if recency_half_life_days is None else recency_half_life_days
    rerank = defaults.rerank if rerank is None else rerank
    feedback = defaults.feedback_weight if feedback_weight is None else feedback_weight
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    if min_score is not None and (
        isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 <= min_score <= 1
    ):
        raise InvalidArgumentError("min_score must be a number from 0 to 1")
    check_reordering(mmr_lambda, half_life, rerank)
    if isinstance(feedback, bool) or not isinstance(feedback, int | float) or not 0 <= feedback <= 1:
        raise InvalidArgumentError("feedback_weight must be a number from 0 to 1 (0: no feedback)")
    if mode not in ("auto", "hybrid", "vector", "keyword"):
        raise InvalidArgumentError("mode must be auto, hybrid, vector or keyword")
    if sources is not None and (not isinstance(sources, list | tuple) or not all(isinstance(s, str) for s in sources)):
        raise InvalidArgumentError("sources must be a list of source names")
    unknown = set(sources or ()) - set(SOURCES)
    if unknown:
        raise InvalidArgumentError(f"unknown source {sorted(unknown)[0]!r}; sources are {', '.join(SOURCES)}")
    days = [_check_day(d, name) for d, name in ((date_from, "date_from"), (date_to, "date_to"))]
    if days[0] and days[1] and days[0] > days[1]:
        raise InvalidArgumentError("date_from is after date_to")
    labels = labels_argument(tags, category)
    filters = Filters(
        sources=tuple(dict.fromkeys(sources or ())),
        path_prefix=normalise_prefix(path_prefix or ""),
        date_from=days[0],
        date_to=days[1],
        tags=labels.tags,
        category=labels.category,
    )
    return SearchOptions(
        limit=limit,
        min_score=None if min_score is None else float(min_score),
        filters=filters,
        mode=mode,  # type: ignore[arg-type]
        mmr_lambda=float(mmr_lambda),
        recency_half_life_days=float(half_life),
        rerank=rerank,
        feedback_weight=float(feedback),
    )


def _check_day(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        return dt.date.fromisoformat(value).isoformat() if len(value) == 10 else _bad_day(name)
    except (TypeError, ValueError):
        return _bad_day(name)


def _bad_day(name: str) -> str:
    raise InvalidArgumentError(f"{name} must be a date written YYYY-MM-DD")


def normalise_prefix(prefix: str) -> str:
    """A relative POSIX path prefix; absolute paths and `..` are refused."""
    if not prefix:
        return ""
    if "\\" in prefix or "\x00" in prefix or prefix.startswith("/"):
        raise InvalidArgumentError("path must be a relative path inside the memory folder")
    trailing = prefix.endswith("/")
    clean = posixpath.normpath(prefix)
    if clean == ".":
        return ""
    if clean == ".." or clean.startswith("../"):
        raise InvalidArgumentError("path must be a relative path inside the memory folder")
    return clean + "/" if trailing else clean


def search(
    store: Store,
    embedder: Embedder | None,
    space: VectorSpace | None,
    query: str,
    options: SearchOptions,
    weights: FusionWeights,
    unavailable: str | None = None,
    *,
    candidate_multiplier: int = CANDIDATE_MULTIPLIER,
    reranker: Reranker | None = None,
    today: dt.date | None = None,
) -> SearchResult:
    """Run one search. `space` is the live vector table when it belongs to `embedder`; `unavailable` says why
    vectors are off when they are. Each side brings `limit * candidate_multiplier` candidates (at least
    MIN_CANDIDATES) to the fusion; `reranker` serves `options.rerank`, `today` (UTC by default) the recency boost."""
    check_query(query)
    started = time.perf_counter()
    db = store.connection()
    candidates = max(options.limit * candidate_multiplier, MIN_CANDIDATES)
    terms = query_terms(query)
    match = keyword_match(store, db, terms) if options.mode != "vector" else None
    notice = unavailable

    # The keyword side runs on its own connection in a pool thread while this one embeds the query and runs the
    # KNN (apsw releases the GIL inside SQLite): search takes the longer of the two, not their sum.
    vector_ids: Future[list[int]] = Future()
    keyword = (
        _KEYWORD_POOL.submit(_keyword_side, store, match, options.filters, candidates, vector_ids) if match else None
    )
    similarities: dict[int, float] = {}
    try:
        query_vector, notice, embed_ms = embed_query(
            embedder if space is not None else None, lambda: query_texts(store, db, query), options.mode, notice
        )
        if query_vector is not None and space is not None:
            if options.filters.labelled:  # ranked exactly among the chunks that pass (server.index.filtered)
                similarities = filtered_similarities(db, space, query_vector, options.filters, candidates)
            else:  # large indexes: the in-memory sign bits, then exact cosine (server.index.binary)
                similarities = nearest(store, db, space, query_vector, options.filters, candidates)
    finally:
        vector_ids.set_result(list(similarities))  # the keyword side never waits for a search that failed
    # Both sides score every candidate: the keyword side also reads the vector candidates' BM25.
    ranks = keyword.result() if keyword is not None else {}
    found = Retrievers.of(similarities, ranks)  # before completion: who found what, on its own
    mode, notice = settle_mode(options.mode, query_vector is not None, match is not None, notice)
    if mode == "hybrid" and query_vector is not None:
        _complete_similarities(db, space, query_vector, similarities, ranks)

    def rows_of(sql_of: Callable[[list[int]], tuple[str, list[object]]]) -> RowsOf:
        return lambda ids: db.execute(*sql_of(ids))

    model = (embedder.provider, embedder.model) if embedder is not None else None
    vectors = (lambda ids: chunk_vectors(db, space, ids)) if space is not None else None
    hits, more = rank_hits(
        similarities, ranks, found, mode, options, weights, query, rows_of(spans_sql), rows_of(hits_sql),
        model=model, vectors=vectors, reranker=reranker, today=today,
    )  # fmt: skip
    search_ms = (time.perf_counter() - started) * 1000 - embed_ms
    return SearchResult(hits, mode, join_notices(notice, more), embed_ms, search_ms)


def embed_query(
    embedder: Embedder | None, texts_of: Callable[[], list[str]], mode: Mode, notice: str | None
) -> tuple[np.ndarray | None, str | None, float]:
    """The query's vector, the mean of the vectors of `texts_of()` (the query, and the query without the names its
    index shares: `server.index.shared_names`; asked only when a vector is made, since it counts words); None
    without a provider serving the live vectors, in keyword mode, or when the provider fails; the notice then, and
    the milliseconds embedding took."""
    if mode == "keyword" or embedder is None:
        return None, notice or ("vector search is unavailable" if mode == "vector" else None), 0.0
    texts = texts_of()
    started = time.perf_counter()
    try:
        vectors = embedder.embed(texts, kind="query")
    except EmbeddingError as exc:
        log.warning("query embedding failed: %s", exc)
        return None, f"vector search is unavailable right now ({exc})", (time.perf_counter() - started) * 1000
    vector = vectors[0] if len(texts) == 1 else normalise(np.mean(vectors, axis=0, keepdims=True))[0]
    return vector, notice, (time.perf_counter() - started) * 1000


def check_query(query: object) -> None:
    """An empty or overlong query is refused (InvalidArgumentError)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgumentError(f"the query is longer than {MAX_QUERY_CHARS} characters")


def settle_mode(wanted: Mode, vector: bool, keyword: bool, notice: str | None) -> tuple[str, str | None]:
    """What ran ("hybrid", "vector" or "keyword") given whether a query vector and keyword terms were had, and the
    notice saying why it is less than hybrid."""
    if vector and keyword:
        return "hybrid", notice
    if vector:
        if wanted != "vector":
            notice = notice or "the query has no searchable words for keyword search"
        return "vector", notice
    return "keyword", notice if keyword else notice or "the query has no searchable words"


def rank_hits(
    similarities: dict[int, float],
    ranks: dict[int, float],
    found: Retrievers,
    mode: str,
    options: SearchOptions,
    weights: FusionWeights,
    query: str,
    spans: RowsOf,
    hits: RowsOf,
    *,
    model: tuple[str, str] | None,
    vectors: VectorsOf | None,
    reranker: Reranker | None = None,
    today: dt.date | None = None,
) -> tuple[list[Hit], str | None]:
    """The hits of a search from its candidates (completed on both sides): fused (in hybrid, again after vector
    feedback from the best hit: server.index.feedback), cut at `min_score` (or gated on the best hit when none was
    given), reordered by the options asked for, merged into places and cited; and the notice to add. Shared by
    every backend; `model` is the (provider, model) of the query vector. A hybrid keyword candidate that the
    completion found no vector for has none yet: it is scored by its keyword share alone (`fusion.fuse`), so a strong
    keyword match passes the gate, and the notice says so."""
    unembedded = {c for c in ranks if c not in similarities} if mode == "hybrid" else set()
    fused = [s for s in fuse(similarities, ranks, weights, mode, unembedded) if s.score > 0]
    threshold = default_min_score(model, mode) if options.min_score is None else options.min_score
    # Not for an answer the gate empties: feedback only raises the best hit's score, the gate would stay shut.
    best = fused[0] if fused else None
    if best and best.score >= threshold and mode == "hybrid" and options.feedback_weight > 0 and vectors is not None:
        moved = feedback_similarities(similarities, best.chunk_id, vectors, options.feedback_weight)
        fused = [s for s in fuse(moved, ranks, weights, mode, unembedded) if s.score > 0]
    if options.min_score is None:  # auto: the answer is empty when even its best hit is under the measured gate
        scored = fused if fused and fused[0].score >= threshold else []
    else:  # a threshold given: every hit under it goes
        scored = [s for s in fused if s.score >= threshold]
    scored, ordered, reordered = reorder(
        hits, vectors, query, scored, spans_of(spans, scored), mmr_lambda=options.mmr_lambda,
        half_life_days=options.recency_half_life_days, rerank=options.rerank, reranker=reranker,
        today=today or dt.datetime.now(dt.UTC).date(),
    )  # fmt: skip
    places = merge_places(ordered, options.limit)
    found_hits = load_hits(hits, places, {s.chunk_id: s for s in scored}, found, query_terms(query))
    empty = nothing_relevant(threshold) if fused and not found_hits else None
    return found_hits, join_notices(join_notices(empty, keyword_alone(len(unembedded))), reordered)


def keyword_alone(count: int) -> str | None:
    """The notice of a hybrid search that met `count` matching chunks without a vector yet."""
    if not count:
        return None
    if count == 1:
        return "1 matching passage has no vector yet, so it is ranked by keyword alone until it is embedded"
    return f"{count} matching passages have no vector yet, so they are ranked by keyword alone until they are embedded"


def _keyword_side(
    store: Store, match: str, filters: Filters, limit: int, vector_ids: Future[list[int]]
) -> dict[int, float]:
    """BM25 of the best `limit` keyword matches and of the vector candidates that match, from one scoring pass."""
    db = store.connection()
    db.execute(CREATE_KEYWORD_SCORES)
    try:
        db.execute(FILL_KEYWORD_SCORES, (match,))
        sql, params = keyword_best_sql(filters, limit)
        ranks: dict[int, float] = dict(db.execute(sql, params))
        wanted = [c for c in vector_ids.result(timeout=KEYWORD_WAIT_SECONDS) if c not in ranks]
        if wanted:
            sql, params = keyword_scores_of_sql(wanted)
            ranks.update(db.execute(sql, params))
        return ranks
    finally:
        db.execute(CLEAR_KEYWORD_SCORES)


def _complete_similarities(
    db: apsw.Connection,
    space: VectorSpace | None,
    query_vector: np.ndarray,
    similarities: dict[int, float],
    ranks: dict[int, float],
) -> None:
    """Exact cosine for keyword candidates that the KNN did not return."""
    missing = [c for c in ranks if c not in similarities]
    if missing and space is not None:
        similarities.update(similarities_of(db, space, query_vector, missing))
