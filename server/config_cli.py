"""`memory-server config`: the effective configuration, as the server would run with it, secrets masked.

Provider API keys are never printed: only where each would come from (a secret file or the environment) and
whether one is there. URLs lose any user:password part.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from server.index.embeddings.select import read_secret, read_secret_file
from server.index.errors import InvalidArgumentError
from server.settings import Settings

SECRETS = ("VOYAGE_API_KEY", "OPENAI_API_KEY")


def register(commands: Any) -> None:
    config = commands.add_parser("config", help="print the effective configuration (secrets masked)")
    config.add_argument("--json", action="store_true", help="print it as JSON")
    config.set_defaults(func=cmd_config)


def effective(settings: Settings, args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, object]:
    """Every setting with its value, command-line overrides applied; where each provider key would come from."""
    embedding, engine = settings.embedding, settings.engine
    return {
        "data_dir": str(args.data_dir),
        "keys_dir": str(args.keys_dir),
        "log_level": args.log_level,
        "host": settings.host,
        "port": settings.port,
        "embedding_providers": list(embedding.providers),
        "embedding_probe": embedding.probe,
        "embedding_timeout_seconds": embedding.http.timeout,
        "embedding_retries": embedding.http.max_retries,
        "embedding_batch": embedding.http.batch_size,
        "voyage_model": embedding.voyage.model,
        "voyage_base_url": _without_userinfo(embedding.voyage.base_url),
        "voyage_dimensions": embedding.voyage.dimensions,
        "openai_model": embedding.openai.model,
        "openai_base_url": _without_userinfo(embedding.openai.base_url),
        "openai_dimensions": embedding.openai.dimensions,
        "weight_vector": engine.weights.vector,
        "weight_keyword": engine.weights.keyword,
        "max_file_bytes": engine.scan.max_file_bytes,
        **{name.lower(): _secret_origin(env, name) for name in SECRETS},
    }


def cmd_config(args: argparse.Namespace) -> int:
    values = effective(args.settings, args, os.environ)
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        width = max(len(key) for key in values)
        for key, value in values.items():
            shown = ", ".join(value) if isinstance(value, list) else ("-" if value is None else value)
            print(f"{key.ljust(width)}  {shown}")
    return 0


def _secret_origin(env: Mapping[str, str], name: str) -> str:
    """'set, from file PATH' / 'set, from NAME' / 'not set' / 'unreadable: why' — never the key itself."""
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
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
