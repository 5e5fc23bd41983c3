"""`memory-server config`: the effective configuration, as the server would run with it, secrets masked.

Each value is shown with where it came from: `default`, `env` (the environment), `file` (the config file) or
`command line`. The names are the config file's keys. Provider API keys are never printed: only where each would
come from (a secret file or the environment) and whether one is there. URLs lose any user:password part.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from redaction import redact
from server.errors import InvalidArgumentError
from server.index.embeddings.select import read_secret, read_secret_file
from server.index.tuning import CALIBRATED_MIN_SCORE
from server.settings import CONFIG_VARIABLE, PASSWORD_PARAMETER, SECRETS, Settings, url_parts

COMMAND_LINE = "command line"


def register(commands: Any) -> None:
    config = commands.add_parser(
        "config",
        help="print the effective configuration and where each value comes from (secrets masked)",
        description=__doc__,
    )
    config.add_argument("--json", action="store_true", help='print it as JSON: {"key": {"value", "origin"}}')
    config.set_defaults(func=cmd_config)


def effective(settings: Settings, args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    """Every setting as (value, origin), command-line overrides applied; where each provider key would come from."""
    embedding, engine, origin = settings.embedding, settings.engine, settings.origins
    values: dict[str, tuple[object, str]] = {
        "config": (str(settings.config_file) if settings.config_file else None, _config_origin(args, env)),
        "data_dir": _override(args.data_dir, settings.data_dir, origin["data_dir"]),
        "keys_dir": _override(args.keys_dir, settings.keys_dir, origin["keys_dir"]),
        "log_level": _override(args.log_level, settings.log_level, origin["log_level"]),
    }
    plain: dict[str, object] = {
        "log_format": settings.log_format,
        "host": settings.host,
        "port": settings.port,
        "metrics_host": settings.metrics_host,
        "metrics_port": settings.metrics_port,
        "embedding_providers": list(embedding.providers),
        "embedding_probe": embedding.probe,
        "embedding_timeout": embedding.http.timeout,
        "embedding_retries": embedding.http.max_retries,
        "embedding_batch": embedding.http.batch_size,
        "embedding_failover_after": embedding.failover_after,
        "embedding_runtime": embedding.runtime,
        "local_model": embedding.local_model,
        "voyage_model": embedding.voyage.model,
        "voyage_base_url": _without_userinfo(embedding.voyage.base_url),
        "voyage_dimensions": embedding.voyage.dimensions,
        "openai_model": embedding.openai.model,
        "openai_base_url": _without_userinfo(embedding.openai.base_url),
        "openai_dimensions": embedding.openai.dimensions,
        "weight_vector": engine.weights.vector,
        "weight_keyword": engine.weights.keyword,
        "max_file_bytes": engine.scan.max_file_bytes,
        "extra_paths": list(settings.extra_paths),
        "chunk_tokens": engine.chunker.max_tokens,
        "chunk_overlap": engine.chunker.overlap_tokens,
        "max_results": engine.search.max_results,
        "min_score": _min_score(engine.search.min_score),
        "candidate_multiplier": engine.search.candidate_multiplier,
        "feedback_weight": engine.search.feedback_weight,
        "mmr_lambda": engine.search.mmr_lambda,
        "recency_half_life_days": engine.search.recency_half_life_days,
        "rerank": engine.search.rerank,
        "rerank_model": settings.rerank_model,
        "embedding_cache_entries": engine.cache_max_entries,
        "redact_writes": settings.redact_writes,
        "history_days": settings.history.all_days,
        "history_max_days": settings.history.max_days,
        "database_url": _without_userinfo(settings.database_url) if settings.database_url else None,
    }
    values.update({key: (value, origin[key]) for key, value in plain.items()})
    for name, per_index in engine.per_index.items():  # [indexes.NAME] tables: only the file sets them
        own = {
            "chunk_tokens": per_index.chunker.max_tokens,
            "chunk_overlap": per_index.chunker.overlap_tokens,
            "max_results": per_index.search.max_results,
            "min_score": _min_score(per_index.search.min_score),
            "feedback_weight": per_index.search.feedback_weight,
            "mmr_lambda": per_index.search.mmr_lambda,
            "recency_half_life_days": per_index.search.recency_half_life_days,
            "rerank": per_index.search.rerank,
        }
        for key, value in own.items():  # a value other than the global one came from the index's table
            values[f"indexes.{name}.{key}"] = (value, "file" if value != plain[key] else origin[key])
    sources = settings.key_sources(env)
    for name in SECRETS:
        where = "file" if f"{name}_FILE" in settings.key_files else "env" if _any_set(env, name) else "default"
        values[name.lower()] = (_secret_origin(sources, name), where)
    return values


def _min_score(value: float | None) -> object:
    """None is the threshold measured per model (`default_min_score`)."""
    measured = ", ".join(f"{score:g} for {model}" for (_provider, model), score in CALIBRATED_MIN_SCORE.items())
    return f"auto (a gate on the best hit: {measured}'s hybrid score, else 0)" if value is None else value


def cmd_config(args: argparse.Namespace) -> int:
    values = effective(args.settings, args, os.environ)
    if args.json:
        answer = {key: {"value": _shown(value), "origin": _shown(where)} for key, (value, where) in values.items()}
        print(json.dumps(answer, indent=2))
        return 0
    shown = {key: (without_secrets(_text(value)), without_secrets(where)) for key, (value, where) in values.items()}
    key_width = max(len(key) for key in shown)
    value_width = min(60, max(len(text) for text, _ in shown.values()))
    for key, (text, where) in shown.items():
        print(f"{key.ljust(key_width)}  {text.ljust(value_width)}  ({where})")
    return 0


def _override(given: object, configured: object, origin: str) -> tuple[object, str]:
    """A global option's value: the command line's when it differs from the configured one."""
    return str(given), COMMAND_LINE if given != configured else origin


def _config_origin(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    if args.config is not None:
        return COMMAND_LINE
    return "env" if env.get(CONFIG_VARIABLE, "").strip() else "default"


def _any_set(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip() or env.get(f"{name}_FILE", "").strip())


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return "-" if value is None else str(value)


def without_secrets(text: str) -> str:
    """`text` with every secret the redaction rules recognise replaced by its marker: what this command and a
    configuration error print, since a value (a key pasted into the wrong setting) or an error about it may hold one."""
    return redact(text).text


def _shown(value: object) -> object:
    return without_secrets(value) if isinstance(value, str) else value


def _secret_origin(env: Mapping[str, str], name: str) -> str:
    """'set, from file PATH' / 'set, from NAME' / 'not set' / 'unusable: why' — never the key itself."""
    try:
        secret = read_secret(env, name)
    except InvalidArgumentError as exc:
        return f"unusable: {exc}"
    if secret is None:
        return "not set"
    path = env.get(f"{name}_FILE", "").strip()
    if path and read_secret_file(name, path) is not None:
        return f"set, from file {path}"
    return f"set, from {name}"


def _without_userinfo(url: str) -> str:
    """`url` with its user and password (`url_parts`), and any `password=` parameter's value, shown as `***`."""
    scheme, userinfo, rest = url_parts(url)
    if not scheme:
        return url
    rest = rest if userinfo is None else "***@" + rest
    return scheme + PASSWORD_PARAMETER.sub(r"\1***", rest)
