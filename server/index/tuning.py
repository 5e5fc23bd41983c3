"""The index's tunable settings (chunking, search defaults, the embedding cache's cap) and their checks. Pure.

Read from environment-style values (`MEMORY_CHUNK_TOKENS=512`); every problem is an InvalidArgumentError naming
the variable and what it takes, never the value (it may be a secret pasted into the wrong setting), which
`server.settings` turns into the config file's key when the value came from there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from server.index.chunker import ChunkerConfig
from server.index.errors import InvalidArgumentError
from server.index.model_package import FP32, INT8
from syncproto.numbers import parse_whole

CHUNK_TOKENS_RANGE = (64, 2048)
MAX_RESULTS_CAP = 50  # memory_search's own cap (server.mcp.tools.MAX_RESULTS: what fits one tool result)
CANDIDATE_MULTIPLIER_RANGE = (1, 20)
MAX_HALF_LIFE_DAYS = 36500  # a century: any longer is no boost at all
# Measured on LoCoMo (development half) and SciFact with the default fusion: a change of the fusion or its weights
# moves the scores, and these must be measured again.
# The int8 model's (bench/results/min_score_int8_7bit.md against min_score_fp32.md): the same gate. A new model id
# (a new int8 recipe) is measured again with bench_min_score.py.
CALIBRATED_MIN_SCORE = {("local", FP32.model_id): 0.35, ("local", INT8.model_id): 0.35}
HEADING_BUDGET = 40  # tokens of heading context at most, a quarter of a small chunk's budget


@dataclass(frozen=True)
class SearchDefaults:
    """What memory_search uses when the caller gives no value; a caller's own value still wins (within caps)."""

    max_results: int = 8
    min_score: float | None = None  # None (auto): a gate on the best hit, measured per model (`default_min_score`)
    # Each side's candidates: max_results times this (at least search.MIN_CANDIDATES). Wider pools let weak
    # candidates chain neighbouring chunks into long places (bench/results/locomo.md).
    candidate_multiplier: int = 1
    # Vector pseudo-relevance feedback (server.index.feedback): the best hit's vector's weight in the query the
    # hybrid candidates are scored again by, 0 for none (bench/explore_prf.py measured it).
    feedback_weight: float = 0.25
    mmr_lambda: float = 1.0  # 1: no diversity step (bench/bench_options.py measured the others)
    recency_half_life_days: float = 0.0  # 0: no recency boost
    rerank: bool = False  # reranking needs VOYAGE_API_KEY on the server


def default_min_score(model: tuple[str, str] | None, mode: str) -> float:
    """The gate of a search given no min_score: its answer is empty when even the best hit scores under this, and
    whole otherwise (a threshold on every hit cut LoCoMo's r@100lines from 0.923 to 0.890 at 0.35; a gate on the
    best one only empties the answers that had nothing relevant). Measured for the hybrid score of `model`
    (provider, model id) by bench/bench_min_score.py and bench/bench_options.py; 0 for a model not measured and
    for vector-only or keyword-only scores, which are scaled otherwise."""
    return CALIBRATED_MIN_SCORE.get(model, 0.0) if model is not None and mode == "hybrid" else 0.0


def chunker_config(tokens: int, overlap: int) -> ChunkerConfig:
    """The chunker for `tokens` per chunk with `overlap` carried over; the heading context scales down with it."""
    return ChunkerConfig(max_tokens=tokens, overlap_tokens=overlap, heading_budget=min(HEADING_BUDGET, tokens // 4))


def chunking_identity(config: ChunkerConfig) -> str:
    """What an index's chunks were cut with, as stored in its meta: a change means every chunk is cut again."""
    return json.dumps(asdict(config), sort_keys=True)


def chunker_of(identity: str | None) -> ChunkerConfig | None:
    """The config an identity names, None when it is missing or unreadable."""
    if not identity:
        return None
    try:
        fields = json.loads(identity)
        if not isinstance(fields, dict):
            return None
        fields.setdefault("dated_context", True)  # marked before the field existed: cut with dates in the context
        return ChunkerConfig(**fields)
    except (ValueError, TypeError):
        return None


def chunking_from_env(env: Mapping[str, str]) -> ChunkerConfig:
    default = ChunkerConfig()
    low, high = CHUNK_TOKENS_RANGE
    tokens = whole(env, "MEMORY_CHUNK_TOKENS", default.max_tokens, low, high)
    overlap = whole(env, "MEMORY_CHUNK_OVERLAP", default.overlap_tokens, 0, high)
    if overlap >= tokens // 2:
        raise InvalidArgumentError(
            f"MEMORY_CHUNK_OVERLAP must be less than half of MEMORY_CHUNK_TOKENS ({tokens}), not {overlap}"
        )
    return chunker_config(tokens, overlap)


def check_model_limit(config: ChunkerConfig, model: str, max_tokens: int) -> None:
    """Refuse chunks longer than the model reads: it would silently drop the rest of each one."""
    if config.max_tokens > max_tokens:
        raise InvalidArgumentError(
            f"MEMORY_CHUNK_TOKENS is {config.max_tokens}, but {model} reads at most {max_tokens} tokens of a text "
            "and would drop the rest of every chunk; set it to at most that"
        )


def search_defaults_from_env(env: Mapping[str, str]) -> SearchDefaults:
    default = SearchDefaults()
    low, high = CANDIDATE_MULTIPLIER_RANGE
    rerank = env.get("MEMORY_RERANK", "").strip().lower()
    if rerank not in ("", "0", "1", "true", "false", "yes", "no"):
        raise InvalidArgumentError("MEMORY_RERANK must be 1 or 0")
    return SearchDefaults(
        max_results=whole(env, "MEMORY_MAX_RESULTS", default.max_results, 1, MAX_RESULTS_CAP),
        min_score=fraction(env, "MEMORY_MIN_SCORE", -1.0) if env.get("MEMORY_MIN_SCORE", "").strip() else None,
        candidate_multiplier=whole(env, "MEMORY_CANDIDATE_MULTIPLIER", default.candidate_multiplier, low, high),
        feedback_weight=fraction(env, "MEMORY_FEEDBACK_WEIGHT", default.feedback_weight),
        mmr_lambda=fraction(env, "MEMORY_MMR_LAMBDA", default.mmr_lambda),
        recency_half_life_days=fraction(
            env, "MEMORY_RECENCY_HALF_LIFE_DAYS", default.recency_half_life_days, MAX_HALF_LIFE_DAYS
        ),
        rerank=rerank in ("1", "true", "yes") if rerank else default.rerank,
    )


def fraction(env: Mapping[str, str], key: str, default: float, high: float = 1.0) -> float:
    """A number from 0 to `high` (1 unless told), or the default when unset."""
    raw = env.get(key, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = math.nan
    if not 0 <= value <= high:  # also refuses nan
        raise InvalidArgumentError(f"{key} must be a number from 0 to {high:g}")
    return value


def whole(env: Mapping[str, str], key: str, default: int, low: int, high: int | None = None) -> int:
    """A whole number from `low` to `high` (no upper bound when None), or the default when unset."""
    raw = env.get(key, "").strip()
    if not raw:
        return default
    value = parse_whole(raw)
    if value is None or value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise InvalidArgumentError(f"{key} must be a whole number {bounds}")
    return value
