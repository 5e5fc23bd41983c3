"""The embedding cache's two rules, one definition for both backends: a prune, at most once a day, of the vectors
unused for `CACHE_KEEP_DAYS`, and a cap in entries that drops the least recently used first. Neither drops the
live model's vectors of current chunks before the rest (filling the live table reads those, and on SQLite a
search rescoring exactly). Pure: the SQL text runs unchanged on SQLite (`server.index.vectors`) and on PostgreSQL
(`server.postgres.search_vectors`): `?` placeholders, row values, an upsert with RETURNING.
"""

from __future__ import annotations

from server.mirror.queries import Query

CACHE_KEEP_DAYS = 30.0  # unused cached vectors live this long (reverts and switching back stay free)
CACHE_PRUNE_EVERY = 86400.0  # seconds between prunes of one index
PRUNED_AT = "cache_pruned_at"  # the meta key of the last prune's time (epoch seconds)

Model = tuple[str, str]  # (provider, model) of the live vectors


_LIVE = "(provider = ? AND model = ? AND hash IN (SELECT hash FROM chunks))"  # the live model's, of current chunks


def claim_prune_sql(meta_table: str, now: float, every: float = CACHE_PRUNE_EVERY) -> Query:
    """Records `now` as the last prune's time if the last was `every` seconds ago or more (or never); a row comes
    back only then. One statement, so of several servers sharing a database exactly one claims each day's prune:
    another's upsert waits for the row and finds the new time."""
    if meta_table not in ("meta", "search_meta"):
        raise ValueError("bad meta table")
    return (
        f"INSERT INTO {meta_table}(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        f" WHERE CAST({meta_table}.value AS DOUBLE PRECISION) <= ? RETURNING key",
        (PRUNED_AT, str(now), now - every),
    )


def prune_sql(model: Model | None, now: float, keep_days: float = CACHE_KEEP_DAYS) -> Query:
    """Delete the vectors unused for `keep_days` unless they are the live model's of current chunks."""
    cutoff = now - keep_days * 86400
    if model is None:
        return "DELETE FROM embedding_cache WHERE used_at < ?", (cutoff,)
    return f"DELETE FROM embedding_cache WHERE used_at < ? AND NOT {_LIVE}", (cutoff, *model)


def count_sql() -> Query:
    return "SELECT count(*) FROM embedding_cache", ()


def cap_sql(model: Model | None, over: int) -> Query:
    """Delete `over` vectors: the least recently used first, the live model's vectors of current chunks last."""
    live, params = (f"{_LIVE}, ", model) if model is not None else ("", ())
    return (
        "DELETE FROM embedding_cache WHERE (provider, model, hash) IN (SELECT provider, model, hash"
        f" FROM embedding_cache ORDER BY {live}used_at, provider, model, hash LIMIT ?)",
        (*params, over),
    )
