"""The server's configuration: the environment over an optional TOML file, both read here and nowhere else.

    settings = Settings.from_env(os.environ)                    # the file named by MEMORY_CONFIG, if any
    settings = Settings.from_env(os.environ, config_file=path)  # `memory-server --config PATH`

Every variable has a key in the file: its name without `MEMORY_`, in lower case (`MEMORY_PORT` is `port`,
`VOYAGE_API_KEY_FILE` is `voyage_api_key_file`). A variable set in the environment wins over the file; an empty
one counts as unset (compose passes variables the operator did not set through as empty). There is no default
location: a file is read only when it is named. It is refused whole when group or others may change it, or when
it has an unknown key, a value of the wrong type, an API key itself instead of the path of a file holding it, or a
database URL holding a password. A key the file sets but the environment overrides is named in a warning at start.
Errors name the setting and what it takes, never the value: it may be a secret pasted into the wrong setting.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from server.errors import InvalidArgumentError
from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain
from server.index.embeddings.select import (
    EmbeddingSettings,
    is_loopback,
    select_embedder,
    select_providers,
    select_reranker,
)
from server.index.engine_settings import EngineSettings
from server.index.fusion import FusionWeights
from server.index.scan import DEFAULT_MAX_FILE_BYTES, DEFAULT_RULES, ScanConfig, ScanRule
from server.index.tuning import chunking_from_env, search_defaults_from_env, whole
from server.index_settings import TABLE, per_index_settings, read_index_tables
from server.mirror.history import Retention
from syncproto.numbers import parse_whole
from syncproto.paths import MAX_EXTRA_FOLDERS, extra_folder_problem

log = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
CONFIG_VARIABLE = "MEMORY_CONFIG"
MAX_CONFIG_BYTES = 64 * 1024
SECRETS = ("VOYAGE_API_KEY", "OPENAI_API_KEY")  # accepted from the environment, never from the file
MAX_HISTORY_DAYS = 36500  # a century; MEMORY_HISTORY_DAYS and MEMORY_HISTORY_MAX_DAYS stay within dates Python holds
PASSWORD_PARAMETER = re.compile(r"(?i)([?&][^=&#]*password=)[^&#]*")  # libpq's password, sslpassword

Origin = Literal["default", "env", "file"]
Kind = Literal["text", "path", "integer", "number", "boolean", "list"]

# Every variable the server reads, with the TOML type its key in the config file takes.
VARIABLES: Mapping[str, Kind] = {
    "MEMORY_DATA_DIR": "path",
    "MEMORY_KEYS_DIR": "path",
    "MEMORY_HOST": "text",
    "MEMORY_PORT": "integer",
    "MEMORY_LOG_LEVEL": "text",
    "MEMORY_LOG_FORMAT": "text",
    "MEMORY_METRICS_HOST": "text",
    "MEMORY_METRICS_PORT": "integer",
    "MEMORY_EMBEDDING_PROVIDERS": "list",
    "MEMORY_EMBEDDING_PROBE": "boolean",
    "MEMORY_EMBEDDING_TIMEOUT": "number",
    "MEMORY_EMBEDDING_RETRIES": "integer",
    "MEMORY_EMBEDDING_BATCH": "integer",
    "MEMORY_EMBEDDING_FAILOVER_AFTER": "number",
    "MEMORY_EMBEDDING_RUNTIME": "text",
    "MEMORY_LOCAL_MODEL": "text",
    "MEMORY_VOYAGE_MODEL": "text",
    "MEMORY_VOYAGE_BASE_URL": "text",
    "MEMORY_VOYAGE_DIMENSIONS": "integer",
    "MEMORY_OPENAI_MODEL": "text",
    "MEMORY_OPENAI_BASE_URL": "text",
    "MEMORY_OPENAI_DIMENSIONS": "integer",
    "MEMORY_WEIGHT_VECTOR": "number",
    "MEMORY_WEIGHT_KEYWORD": "number",
    "MEMORY_MAX_FILE_BYTES": "integer",
    "MEMORY_EXTRA_PATHS": "list",
    "MEMORY_CHUNK_TOKENS": "integer",
    "MEMORY_CHUNK_OVERLAP": "integer",
    "MEMORY_MAX_RESULTS": "integer",
    "MEMORY_MIN_SCORE": "number",
    "MEMORY_CANDIDATE_MULTIPLIER": "integer",
    "MEMORY_FEEDBACK_WEIGHT": "number",
    "MEMORY_MMR_LAMBDA": "number",
    "MEMORY_RECENCY_HALF_LIFE_DAYS": "number",
    "MEMORY_RERANK": "boolean",
    "MEMORY_RERANK_MODEL": "text",
    "MEMORY_EMBEDDING_CACHE_ENTRIES": "integer",
    "MEMORY_REDACT_WRITES": "boolean",
    "MEMORY_HISTORY_DAYS": "integer",
    "MEMORY_HISTORY_MAX_DAYS": "integer",
    "MEMORY_DATABASE_URL": "text",
    "VOYAGE_API_KEY_FILE": "path",
    "OPENAI_API_KEY_FILE": "path",
}
_KINDS: Mapping[Kind, str] = {
    "text": "a string",
    "path": "a string (a path; a relative one is taken from the config file's folder)",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "list": 'a list of strings, e.g. ["voyage", "local"]',
}


def _database_url(env: Mapping[str, str]) -> str | None:
    url = env.get("MEMORY_DATABASE_URL", "").strip()
    if not url:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise InvalidArgumentError("MEMORY_DATABASE_URL must be a postgresql:// URL")
    return url


def url_parts(url: str) -> tuple[str, str | None, str]:
    """`url` as (`scheme://`, its user part or None, the rest after the user part's '@'); ("", None, url) without a
    scheme. The user part runs to an '@' before the first '/', as libpq reads it: a password may hold '?' or '#',
    where urlsplit would stop."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return "", None, url
    end = rest.find("/")
    at = rest.rfind("@", 0, len(rest) if end < 0 else end)
    return scheme + separator, (rest[:at] if at >= 0 else None), rest[at + 1 :]


def _holds_password(url: str) -> bool:
    """Whether `url` carries a password: after the user name, or as a `password=` (`sslpassword=`) parameter."""
    _scheme, userinfo, rest = url_parts(url)
    if userinfo is not None and userinfo.partition(":")[2]:
        return True
    return any(len(found.group(0)) > len(found.group(1)) for found in PASSWORD_PARAMETER.finditer(rest))


def file_key(variable: str) -> str:
    """The config file's key for an environment variable: `MEMORY_PORT` -> `port`."""
    return variable.removeprefix("MEMORY_").lower()


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("data")
    keys_dir: Path = Path("keys")
    log_level: str = "warning"
    log_format: str = "text"
    host: str = "127.0.0.1"
    port: int = 8765
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # None: no plain metrics listener
    redact_writes: bool = True  # secrets in memory_write content become [redacted:<kind>] markers
    extra_paths: tuple[str, ...] = ()  # folders beside memory/ indexed and synced like it (syncproto.paths)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    history: Retention = field(default_factory=Retention)  # how long versions of memory files are kept
    database_url: str | None = None  # PostgreSQL (postgresql://...) for the files; None: SQLite under data_dir
    rerank_model: str = "rerank-2-lite"  # Voyage's; used where rerank is on (MEMORY_RERANK, per index)
    config_file: Path | None = None
    origins: Mapping[str, Origin] = field(default_factory=dict)  # file key -> where its value came from
    overridden: Mapping[str, str] = field(default_factory=dict)  # file key the file sets -> the variable that wins
    key_files: Mapping[str, str] = field(default_factory=dict)  # NAME_FILE -> path, from the config file

    @classmethod
    def from_env(cls, env: Mapping[str, str], config_file: Path | None = None) -> Settings:
        """The settings from `env` over the config file (`config_file`, else the one `MEMORY_CONFIG` names)."""
        named = config_file or (Path(env[CONFIG_VARIABLE]) if _is_set(env, CONFIG_VARIABLE) else None)
        tables: dict[str, dict[str, str]] = {}  # [indexes.NAME] -> its values
        from_file = read_config_file(named, tables) if named is not None else {}
        merged: dict[str, str] = {}
        origins: dict[str, Origin] = {}
        for variable in VARIABLES:
            if _is_set(env, variable):
                merged[variable], origins[file_key(variable)] = env[variable], "env"
            elif variable in from_file:
                merged[variable], origins[file_key(variable)] = from_file[variable], "file"
            else:
                origins[file_key(variable)] = "default"
        # A provider key configured in the environment (the key, or its file) wins over the file's key file.
        key_files = {
            f"{name}_FILE": from_file[f"{name}_FILE"]
            for name in SECRETS
            if f"{name}_FILE" in from_file and not _is_set(env, name) and not _is_set(env, f"{name}_FILE")
        }
        overridden = {file_key(variable): variable for variable in from_file if _is_set(env, variable)}
        overridden.update(
            {file_key(f"{name}_FILE"): name for name in SECRETS if f"{name}_FILE" in from_file and _is_set(env, name)}
        )
        try:
            settings = cls._parse(merged, named, origins, key_files, overridden)
        except InvalidArgumentError as exc:
            raise _located(exc, origins, named) from None
        per_index = per_index_settings(merged, settings.engine, tables, named)
        return dataclasses.replace(settings, engine=dataclasses.replace(settings.engine, per_index=per_index))

    @classmethod
    def _parse(
        cls,
        env: Mapping[str, str],
        named: Path | None,
        origins: Mapping[str, Origin],
        key_files: Mapping[str, str],
        overridden: Mapping[str, str],
    ) -> Settings:
        log_level = env.get("MEMORY_LOG_LEVEL", "warning").strip().lower()
        if log_level not in LOG_LEVELS:
            raise InvalidArgumentError(f"MEMORY_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
        log_format = env.get("MEMORY_LOG_FORMAT", "text").strip().lower()
        if log_format not in LOG_FORMATS:
            raise InvalidArgumentError(f"MEMORY_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
        metrics_host = env.get("MEMORY_METRICS_HOST", "127.0.0.1").strip()
        if not is_loopback(metrics_host):
            raise InvalidArgumentError(
                "MEMORY_METRICS_HOST must be a loopback address (127.0.0.1, ::1 or localhost): "
                "the metrics listener has no authentication"
            )
        try:
            weights = FusionWeights(
                vector=_number(env, "MEMORY_WEIGHT_VECTOR", FusionWeights.vector),
                keyword=_number(env, "MEMORY_WEIGHT_KEYWORD", FusionWeights.keyword),
            )
        except ValueError:  # FusionWeights' own rule: not both zero
            raise InvalidArgumentError("MEMORY_WEIGHT_VECTOR and MEMORY_WEIGHT_KEYWORD must not both be 0") from None
        extra_paths = _extra_paths(env.get("MEMORY_EXTRA_PATHS", ""))
        scan = ScanConfig(
            rules=(*DEFAULT_RULES, *(ScanRule(f"{folder}/**/*.md") for folder in extra_paths)),
            max_file_bytes=whole(env, "MEMORY_MAX_FILE_BYTES", DEFAULT_MAX_FILE_BYTES, 1),
        )
        port = _port(env, "MEMORY_PORT")
        redact_writes = env.get("MEMORY_REDACT_WRITES", "1").strip().lower()
        if redact_writes not in ("0", "1", "true", "false", "yes", "no"):
            raise InvalidArgumentError("MEMORY_REDACT_WRITES must be 1 or 0")
        return cls(
            data_dir=Path(env.get("MEMORY_DATA_DIR", "data")),
            keys_dir=Path(env.get("MEMORY_KEYS_DIR", "keys")),
            log_level=log_level,
            log_format=log_format,
            host=env.get("MEMORY_HOST", "127.0.0.1").strip(),
            port=port if port is not None else 8765,
            metrics_host=metrics_host,
            metrics_port=_port(env, "MEMORY_METRICS_PORT"),
            redact_writes=redact_writes in ("1", "true", "yes"),
            extra_paths=extra_paths,
            embedding=EmbeddingSettings.from_env(env),
            engine=EngineSettings(
                chunker=chunking_from_env(env),
                scan=scan,
                weights=weights,
                search=search_defaults_from_env(env),
                cache_max_entries=whole(env, "MEMORY_EMBEDDING_CACHE_ENTRIES", 0, 0),
            ),
            history=Retention(
                all_days=whole(env, "MEMORY_HISTORY_DAYS", Retention.all_days, 0, MAX_HISTORY_DAYS),
                max_days=whole(env, "MEMORY_HISTORY_MAX_DAYS", Retention.max_days, 0, MAX_HISTORY_DAYS),
            ),
            database_url=_database_url(env),
            rerank_model=env.get("MEMORY_RERANK_MODEL", "").strip() or cls.rerank_model,
            config_file=named,
            origins=dict(origins),
            overridden=dict(overridden),
            key_files=dict(key_files),
        )

    def warn_of_overridden_keys(self) -> None:
        """Log a warning for each key the config file sets but the environment overrides (the image sets
        MEMORY_PORT, MEMORY_DATA_DIR and MEMORY_KEYS_DIR itself): the key and the variable, never a value."""
        for key, variable in self.overridden.items():
            log.warning(
                "config file %s sets %s, but %s in the environment wins over it", self.config_file, key, variable
            )

    def key_sources(self, env: Mapping[str, str]) -> dict[str, str]:
        """Where provider keys are read from: `env`, plus the config file's key files for the providers whose
        key the environment does not configure. Only paths come from the file, never keys."""
        return {**env, **self.key_files}

    def select_providers(self, env: Mapping[str, str]) -> tuple[ProviderChain, list[str]]:
        """Every configured provider in fallback order, each behind a breaker: what a long-running server uses."""
        return select_providers(self.embedding, self.key_sources(env))

    def with_reranker(self, env: Mapping[str, str]) -> Settings:
        """These settings with the reranker in the engine's (and every index's) settings, when the Voyage key is
        configured; without it, a search that asks for reranking keeps its order and says why."""
        reranker = select_reranker(self.rerank_model, self.embedding, self.key_sources(env))
        engine = dataclasses.replace(self.engine, reranker=reranker)
        per_index = {name: dataclasses.replace(own, reranker=reranker) for name, own in engine.per_index.items()}
        return dataclasses.replace(self, engine=dataclasses.replace(engine, per_index=per_index))

    def select_embedder(self, env: Mapping[str, str]) -> tuple[Embedder | None, list[str]]:
        """The first usable provider in the configured order, and why the ones before it were skipped."""
        return select_embedder(self.embedding, self.key_sources(env))


def read_config_file(path: Path, index_tables: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """The file's settings as environment values (`{"MEMORY_PORT": "9000"}`), every key and type checked; its
    `[indexes.NAME]` tables go to `index_tables` (`server.index_settings`)."""
    data = _read_safely(path)
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"config file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgumentError(f"config file {path}: not valid TOML: {exc}") from None
    if TABLE in table:
        found = read_index_tables(table.pop(TABLE), path)
        if index_tables is not None:
            index_tables.update(found)
    variables = {file_key(variable): variable for variable in VARIABLES}
    values: dict[str, str] = {}
    for key, value in table.items():
        if key in {name.lower() for name in SECRETS}:
            raise InvalidArgumentError(
                f"config file {path}: {key} is not accepted in a config file, which ends up in backups and diffs; "
                f"put the key in a file of its own (mode 0600) and set {key}_file to its path"
            )
        variable = variables.get(key)
        if variable is None:
            close = difflib.get_close_matches(key, variables, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys are: {', '.join(variables)}"
            raise InvalidArgumentError(f"config file {path}: unknown key {key!r}; {hint}")
        values[variable] = _as_text(path, key, VARIABLES[variable], value)
        if variable == "MEMORY_DATABASE_URL" and _holds_password(values[variable]):
            raise InvalidArgumentError(
                f"config file {path}: {key} holds a password, which a config file must not (it ends up in backups "
                "and diffs, and others may read it); leave the password out of the file and set MEMORY_DATABASE_URL "
                "in the environment, or use PGPASSFILE"
            )
    return values


def _read_safely(path: Path) -> bytes:
    try:  # O_NONBLOCK: a FIFO named here must not hang the start; fstat below refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidArgumentError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise InvalidArgumentError(f"config file {path}: cannot open it ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgumentError(f"config file {path} is not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022:
            raise InvalidArgumentError(
                f"refusing config file {path}: mode {mode:04o} lets group or others change the server's "
                f"configuration; run: chmod go-w {path}"
            )
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise InvalidArgumentError(f"config file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    return data


def _as_text(path: Path, key: str, kind: Kind, value: object) -> str:
    """A file value as the environment would hold it. Values are never echoed: one may be a misplaced secret."""
    text: str | None = None
    if kind in ("text", "path", "list") and isinstance(value, str):  # a list may also be "voyage, local"
        text = value
    elif kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        text = repr(value)
    elif kind == "boolean" and isinstance(value, bool):
        text = "1" if value else "0"
    elif kind == "list" and isinstance(value, list) and all(isinstance(item, str) for item in value):
        text = ",".join(value)
    if text is None:
        raise InvalidArgumentError(f"config file {path}: {key} must be {_KINDS[kind]}, not {_toml_type(value)}")
    if not text.strip():
        raise InvalidArgumentError(f"config file {path}: {key} is empty; leave it out for the default")
    if kind == "path":
        return str(path.parent / Path(text).expanduser())  # an absolute path stays as it is
    return text


def _toml_type(value: object) -> str:
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string")):
        if isinstance(value, kind):
            return name
    return "a table" if isinstance(value, dict) else "an array" if isinstance(value, list) else "a date or time"


def _located(error: InvalidArgumentError, origins: Mapping[str, Origin], named: Path | None) -> InvalidArgumentError:
    """The error, saying so when the value it names came from the config file rather than the environment."""
    message = str(error)
    for variable in VARIABLES:
        if variable in message and origins.get(file_key(variable)) == "file":
            return InvalidArgumentError(f"{message} (set as {file_key(variable)} in {named})")
    return error


def _is_set(env: Mapping[str, str], variable: str) -> bool:
    return bool(env.get(variable, "").strip())


def _extra_paths(raw: str) -> tuple[str, ...]:
    folders = tuple(dict.fromkeys(item.strip() for item in raw.split(",") if item.strip()))
    for folder in folders:
        problem = extra_folder_problem(folder)
        if problem:
            raise InvalidArgumentError(f"MEMORY_EXTRA_PATHS: {folder!r} cannot be a memory folder: {problem}")
    if len(folders) > MAX_EXTRA_FOLDERS:
        raise InvalidArgumentError(f"MEMORY_EXTRA_PATHS may name at most {MAX_EXTRA_FOLDERS} folders")
    return folders


def _port(env: Mapping[str, str], key: str) -> int | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    port = parse_whole(raw)
    if port is None or not 0 <= port <= 65535:
        raise InvalidArgumentError(f"{key} must be a TCP port (0-65535)")
    return port


def _number(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{key} must be a finite number of at least 0")
    return value
