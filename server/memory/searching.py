"""Searching one or several indexes for a caller: hits labelled with who changed the file when, modes and
notices merged, the weakest search mode reported."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Literal, cast

from server.index.search import SearchOptions
from server.indexes.registry import IndexRegistry
from server.memory.results import SearchHit, SearchOutput
from server.mirror.state import iso_epoch

_MODE_RANK = {"keyword": 0, "vector": 1, "hybrid": 2}


def search_indexes(
    registry: IndexRegistry, name: str, names: list[str], query: str, options: SearchOptions
) -> SearchOutput:
    """Search `names` (the caller's own index `name` first, created if need be; others only if they exist)."""
    ranked: list[list[SearchHit]] = []  # each index's hits in its own order
    modes: list[str] = []
    notices: list[str] = []
    searched: list[str] = []
    pending = 0
    updated_at: str | None = None
    for index_name in names:
        handle = registry.open(index_name, create=index_name == name)
        if handle is None:
            continue
        files_pending = registry.freshen(handle)
        result = handle.index.search(query, options)
        states = handle.mirror.states([h.path for h in result.hits])
        hits: list[SearchHit] = []
        ranked.append(hits)
        for hit in result.hits:
            state = states.get(hit.path)
            hits.append(
                SearchHit(
                    path=hit.path,
                    start_line=hit.start_line,
                    end_line=hit.end_line,
                    heading=hit.heading,
                    score=round(hit.score, 4),
                    snippet=hit.snippet,
                    source=cast(Literal["memory", "sessions"], hit.source),
                    citation=hit.citation,
                    index=index_name,
                    updated_by=state.updated_by if state else None,
                    updated_at=state.updated_at if state else None,
                    matched_by=hit.matched_by,
                    vector_rank=hit.vector_rank,
                    keyword_rank=hit.keyword_rank,
                    tags=list(hit.tags),
                    category=hit.category,
                )
            )
        searched.append(index_name)
        modes.append(result.mode)
        if result.notice and result.notice not in notices:
            notices.append(result.notice)
        if index_name == name:
            pending = files_pending
            updated_at = iso_epoch(handle.index.last_change())
    if pending:
        notices.append(f"{pending} changed files are not indexed yet; memory_sync indexes them")
    return SearchOutput(
        hits=merge_ranked(ranked)[: options.limit],
        search_mode=cast(Literal["hybrid", "vector", "keyword"], min(modes, key=_MODE_RANK.__getitem__)),
        notice="; ".join(notices) or None,
        indexes=searched,
        index_updated_at=updated_at,
        pending_files=pending,
    )


def merge_ranked(ranked: Sequence[Sequence[SearchHit]]) -> list[SearchHit]:
    """Several indexes' hits as one list: the best next hit of any index first, each index's own order kept (its
    diversity and reranking order hits by more than their scores, which a plain sort by score would undo)."""
    return list(heapq.merge(*ranked, key=lambda hit: -hit.score))
