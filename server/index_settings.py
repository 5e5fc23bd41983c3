"""Per-index values in the server's config file: a table per index that needs other chunking or search defaults.

    [indexes.team-docs]        # long design documents: bigger chunks, only confident hits by default
    chunk_tokens = 512
    chunk_overlap = 64
    min_score = 0.3
    max_results = 5
    mmr_lambda = 0.7           # and the reordering options: diversity, a recency boost, reranking
    recency_half_life_days = 30
    rerank = true

Only these keys may differ per index (`PER_INDEX`): chunking suits an index's kind of text, and the search
defaults its readers. The others are the process's (one model, one cache policy, one listener). The file alone sets
them; each index's values start from the global ones (environment over file) and are checked the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from server.errors import InvalidArgumentError
from server.index.engine_settings import EngineSettings
from server.index.naming import NAME_PATTERN
from server.index.tuning import chunking_from_env, search_defaults_from_env

PER_INDEX = {
    "chunk_tokens": "MEMORY_CHUNK_TOKENS",
    "chunk_overlap": "MEMORY_CHUNK_OVERLAP",
    "max_results": "MEMORY_MAX_RESULTS",
    "min_score": "MEMORY_MIN_SCORE",
    "feedback_weight": "MEMORY_FEEDBACK_WEIGHT",
    "mmr_lambda": "MEMORY_MMR_LAMBDA",
    "recency_half_life_days": "MEMORY_RECENCY_HALF_LIFE_DAYS",
    "rerank": "MEMORY_RERANK",
}
NUMBERS = ("min_score", "feedback_weight", "mmr_lambda", "recency_half_life_days")
TABLE = "indexes"


def read_index_tables(raw: object, path: Path) -> dict[str, dict[str, str]]:
    """`[indexes.NAME]` tables as environment-style values per index, names, keys and types checked."""
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"config file {path}: {TABLE} must be tables, e.g. [{TABLE}.team-docs]")
    tables: dict[str, dict[str, str]] = {}
    for name, table in raw.items():
        if not NAME_PATTERN.match(name):
            raise InvalidArgumentError(f"config file {path}: [{TABLE}.{name}] does not name an index")
        if not isinstance(table, dict):
            raise InvalidArgumentError(f"config file {path}: {TABLE}.{name} must be a table")
        values: dict[str, str] = {}
        for key, value in table.items():
            where = f"{TABLE}.{name}.{key}"
            if key not in PER_INDEX:
                raise InvalidArgumentError(
                    f"config file {path}: unknown key {where!r}; an index may set {', '.join(PER_INDEX)}"
                )
            if key == "rerank":
                if not isinstance(value, bool):
                    raise InvalidArgumentError(f"config file {path}: {where} must be true or false")
                values[PER_INDEX[key]] = "1" if value else "0"
                continue
            number = key in NUMBERS
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (isinstance(value, float) and not number)
            ):
                raise InvalidArgumentError(
                    f"config file {path}: {where} must be {'a number' if number else 'an integer'}"
                )
            values[PER_INDEX[key]] = repr(value)
        tables[name] = values
    return tables


def per_index_settings(
    env: Mapping[str, str], base: EngineSettings, tables: Mapping[str, Mapping[str, str]], path: Path | None
) -> dict[str, EngineSettings]:
    """Each table's EngineSettings: the global values with the table's over them, checked as a whole."""
    found: dict[str, EngineSettings] = {}
    for name, values in tables.items():
        merged = {**env, **values}
        try:
            found[name] = dataclasses.replace(
                base, chunker=chunking_from_env(merged), search=search_defaults_from_env(merged), per_index={}
            )
        except InvalidArgumentError as exc:
            keys = [key for key, variable in PER_INDEX.items() if variable in str(exc) and variable in values]
            where = f" (set as {TABLE}.{name}.{keys[0]} in {path})" if keys else f" (for [{TABLE}.{name}] in {path})"
            raise InvalidArgumentError(f"{exc}{where}") from None
    return found
