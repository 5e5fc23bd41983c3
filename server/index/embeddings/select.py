"""Choosing the embedding provider at start-up: the first usable one in the configured fallback order.

A provider is skipped (with the reason kept for `status` and the log) when it is not configured (no API key), its
package is missing, or its probe request fails. A provider that is configured wrongly (an unknown name, an
unreadable or malformed key file) is an error, not a silent fallback. With no usable provider the server runs
keyword-only and says so in every search result.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import FAILOVER_AFTER, ProviderChain
from server.index.embeddings.remote import HttpEmbedder, HttpOptions, OpenAIEmbedder, VoyageEmbedder
from server.index.errors import EmbeddingError, InvalidArgumentError
from server.index.model_package import DEFAULT_LOCAL_MODEL, LOCAL_MODELS, default_local_model
from server.index.rerank import GuardedReranker, VoyageReranker

log = logging.getLogger(__name__)

PROVIDERS = ("local", "voyage", "openai", "none")
LOCAL_RUNTIMES = ("onnx", "torch")  # local.RUNTIMES, without importing the local model's module here
MAX_SECRET_BYTES = 4096

# Dimensions of the models we know, for when probing is turned off; a probe reads them from the API itself.
KNOWN_DIMENSIONS = {
    "voyage-3.5": 1024,
    "voyage-3.5-lite": 1024,
    "voyage-3": 1024,
    "voyage-3-lite": 512,
    "voyage-code-3": 1024,
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# The most tokens one input may have; our chunks (sized for MiniLM's 254) stay far below these.
REMOTE_MAX_TOKENS = {"voyage": 32000, "openai": 8191}


@dataclass(frozen=True)
class RemoteSettings:
    model: str
    base_url: str
    dimensions: int | None = None  # None: ask the API (probe) or the table above


@dataclass(frozen=True)
class EmbeddingSettings:
    providers: tuple[str, ...] = ("local",)
    voyage: RemoteSettings = field(
        default_factory=lambda: RemoteSettings(model="voyage-3.5-lite", base_url="https://api.voyageai.com")
    )
    openai: RemoteSettings = field(
        default_factory=lambda: RemoteSettings(model="text-embedding-3-small", base_url="https://api.openai.com")
    )
    http: HttpOptions = field(default_factory=HttpOptions)
    probe: bool = True
    failover_after: float = FAILOVER_AFTER  # seconds a provider fails before the next one's vectors are built
    runtime: str = "onnx"  # what runs the local model: "onnx" (no torch) or "torch" (sentence-transformers)
    local_model: str = DEFAULT_LOCAL_MODEL.name  # which of model_package.LOCAL_MODELS the local provider runs

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EmbeddingSettings:
        names = tuple(p.strip().lower() for p in env.get("MEMORY_EMBEDDING_PROVIDERS", "local").split(",") if p.strip())
        if not names:
            raise InvalidArgumentError("MEMORY_EMBEDDING_PROVIDERS is empty; use 'none' for keyword-only search")
        unknown = [n for n in names if n not in PROVIDERS]
        if unknown:
            raise InvalidArgumentError(
                f"MEMORY_EMBEDDING_PROVIDERS names unknown provider(s) {', '.join(unknown)}; "
                f"choose from {', '.join(PROVIDERS)}"
            )
        if len(set(names)) != len(names):
            raise InvalidArgumentError("MEMORY_EMBEDDING_PROVIDERS lists a provider twice")
        defaults = cls()
        http = HttpOptions(
            timeout=_positive(env, "MEMORY_EMBEDDING_TIMEOUT", defaults.http.timeout, float),
            max_retries=int(_positive(env, "MEMORY_EMBEDDING_RETRIES", defaults.http.max_retries, int, zero=True)),
            backoff=defaults.http.backoff,
            batch_size=int(_positive(env, "MEMORY_EMBEDDING_BATCH", defaults.http.batch_size, int)),
        )
        probe = env.get("MEMORY_EMBEDDING_PROBE", "1").strip().lower()
        if probe not in ("0", "1", "true", "false", "yes", "no"):
            raise InvalidArgumentError("MEMORY_EMBEDDING_PROBE must be 1 or 0")
        runtime = env.get("MEMORY_EMBEDDING_RUNTIME", defaults.runtime).strip().lower() or defaults.runtime
        if runtime not in LOCAL_RUNTIMES:
            raise InvalidArgumentError(f"MEMORY_EMBEDDING_RUNTIME must be one of {', '.join(LOCAL_RUNTIMES)}")
        return cls(
            local_model=_local_model(env, runtime),
            providers=names,
            voyage=_remote(env, "VOYAGE", defaults.voyage),
            openai=_remote(env, "OPENAI", defaults.openai),
            http=http,
            probe=probe in ("1", "true", "yes"),
            failover_after=_positive(env, "MEMORY_EMBEDDING_FAILOVER_AFTER", defaults.failover_after, float, zero=True),
            runtime=runtime,
        )


def _local_model(env: Mapping[str, str], runtime: str) -> str:
    """MEMORY_LOCAL_MODEL, checked; unset, the default, or the float32 model where the runtime is torch."""
    name = env.get("MEMORY_LOCAL_MODEL", "").strip()
    if not name:
        return default_local_model(runtime).name
    if name not in LOCAL_MODELS:
        raise InvalidArgumentError(f"MEMORY_LOCAL_MODEL must be one of {', '.join(LOCAL_MODELS)}")
    if runtime == "torch" and not LOCAL_MODELS[name].torch:
        raise InvalidArgumentError(f"MEMORY_LOCAL_MODEL={name} runs on MEMORY_EMBEDDING_RUNTIME=onnx only")
    return name


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only: localhost, 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _remote(env: Mapping[str, str], prefix: str, default: RemoteSettings) -> RemoteSettings:
    variable = f"MEMORY_{prefix}_BASE_URL"
    base_url = env.get(variable, default.base_url).strip()
    if not base_url.startswith(("https://", "http://")):
        raise InvalidArgumentError(f"{variable} must be an http(s) URL")
    if base_url.startswith("http://") and not is_loopback(_host(base_url)):
        raise InvalidArgumentError(
            f"{variable} must be an https:// URL; plain http:// only to this machine (127.0.0.1, ::1 or "
            "localhost): the API key would travel in clear"
        )
    raw_dims = env.get(f"MEMORY_{prefix}_DIMENSIONS", "").strip()
    return RemoteSettings(
        model=env.get(f"MEMORY_{prefix}_MODEL", default.model).strip() or default.model,
        base_url=base_url,
        dimensions=int(_positive(env, f"MEMORY_{prefix}_DIMENSIONS", 1, int)) if raw_dims else None,
    )


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:  # a malformed address (an unclosed '[')
        return ""


def _positive(
    env: Mapping[str, str], key: str, default: float, kind: Callable[[str], float], zero: bool = False
) -> float:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:  # also more digits than int() reads
        raise InvalidArgumentError(f"{key} must be a number") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > 1_000_000:
        raise InvalidArgumentError(f"{key} is out of range")
    return value


def read_secret(env: Mapping[str, str], name: str) -> str | None:
    """The key in the file named by `NAME_FILE` (compose secrets), else `NAME` from the environment; None when
    neither holds one. An empty secret file counts as absent, so compose can always mount one (from /dev/null when
    the operator has none) while a plain environment variable stays the fallback."""
    inline = env.get(name, "").strip()
    path = env.get(f"{name}_FILE", "").strip()
    from_file = read_secret_file(name, path) if path else None
    if from_file is not None:
        if inline:
            log.warning("%s_FILE and %s are both set; using the file", name, name)
        return from_file
    if inline and any(c.isspace() for c in inline):
        raise InvalidArgumentError(f"{name} must hold exactly one key, without spaces")
    return inline or None


def read_secret_file(name: str, path: str) -> str | None:
    """The key in the file at `path`. Refused at once: a FIFO, socket or other special file (only /dev/null, which
    compose mounts for an unused secret, reads as "no key"), and a key that group or others may read."""
    try:  # O_NONBLOCK: a FIFO must not hang the start; fstat below refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgumentError(f"{name}_FILE {path}: cannot read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if _is_dev_null(info):
            return None
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgumentError(f"{name}_FILE {path}: not a regular file")
        try:
            data = handle.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            raise InvalidArgumentError(f"{name}_FILE {path}: cannot read ({exc.strerror})") from None
    if len(data) > MAX_SECRET_BYTES:
        raise InvalidArgumentError(f"{name}_FILE {path}: too large to be an API key")
    try:
        secret = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{name}_FILE {path}: not UTF-8 text") from None
    if any(c.isspace() for c in secret):
        raise InvalidArgumentError(f"{name}_FILE {path}: must hold exactly one key on one line")
    mode = stat.S_IMODE(info.st_mode)
    if secret and mode & 0o077:  # an empty file holds no key, whoever may read it
        raise InvalidArgumentError(
            f"refusing {name}_FILE {path}: mode {mode:04o} lets other users read the key; run: chmod 600 {path}"
        )
    return secret or None


def _is_dev_null(info: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == null.st_rdev


def select_embedder(settings: EmbeddingSettings, env: Mapping[str, str]) -> tuple[Embedder | None, list[str]]:
    """The first usable provider in `settings.providers`, and why each one before it was skipped.

    The choice is logged here, once for every program that makes it."""
    reasons: list[str] = []
    for name in settings.providers:
        if name == "none":
            reasons.append("none: keyword-only search was configured")
            log.info("keyword-only search was configured")
            return None, reasons
        try:
            embedder = _build(name, settings, env)
            failure = _probe(embedder, settings)
        except EmbeddingError as exc:
            failure = str(exc)
        else:
            if failure is not None and isinstance(embedder, HttpEmbedder):
                embedder.close()
        if failure is not None:
            reasons.append(f"{name}: {failure}")
            log.warning("embedding provider %s skipped: %s", name, failure)
            continue
        return embedder, reasons
    log.warning("no embedding provider is usable; search is keyword-only")
    return None, reasons


def select_providers(
    settings: EmbeddingSettings, env: Mapping[str, str], *, clock: Callable[[], float] = time.monotonic
) -> tuple[ProviderChain, list[str]]:
    """Every usable provider in `settings.providers`, in order, for a server that runs for days: one whose probe
    fails now is kept with its breaker open (taken back when it answers), where `select_embedder` skips it. A
    provider that is not configured (no key, no package), or whose dimensions only its failed probe could have
    told, is skipped, and `none` ends the list."""
    providers: list[Embedder] = []
    failures: list[str | None] = []
    reasons: list[str] = []
    for name in settings.providers:
        if name == "none":
            break
        try:
            embedder = _build(name, settings, env)
            failure = _probe(embedder, settings)
        except EmbeddingError as exc:
            reasons.append(f"{name}: {exc}")
            log.warning("embedding provider %s skipped: %s", name, exc)
            continue
        if failure is not None:
            log.warning("embedding provider %s does not answer yet: %s", name, failure)
        providers.append(embedder)
        failures.append(failure)
    if not providers:
        log.warning("no embedding provider is usable; search is keyword-only")
    chain = ProviderChain.of(providers, failover_after=settings.failover_after, failures=failures, clock=clock)
    return chain, reasons


def _probe(embedder: Embedder, settings: EmbeddingSettings) -> str | None:
    """Embed one word with a remote provider (when probing is on) to check its key, URL and dimensions; why it
    failed, or None. Unknown dimensions are learnt from the answer; when the probe fails they stay unknown, and
    that is an error (EmbeddingError, the provider closed): its vectors could not be named."""
    if not settings.probe or not isinstance(embedder, HttpEmbedder):
        return None
    try:
        answered = embedder.probe()
    except EmbeddingError as exc:
        if embedder.dimensions == 0:
            embedder.close()
            raise
        return str(exc)
    if embedder.dimensions == 0:
        embedder.dimensions = answered
    elif answered != embedder.dimensions:
        return f"model {embedder.model} answered with {answered} dimensions, expected {embedder.dimensions}"
    return None


def select_reranker(model: str, settings: EmbeddingSettings, env: Mapping[str, str]) -> GuardedReranker | None:
    """Voyage's reranker with the Voyage key and base URL, behind its breaker; None when no key is configured."""
    api_key = read_secret(env, "VOYAGE_API_KEY")
    if api_key is None:
        return None
    reranker = VoyageReranker(model=model, api_key=api_key, base_url=settings.voyage.base_url, options=settings.http)
    return GuardedReranker(reranker)


def _build(name: str, settings: EmbeddingSettings, env: Mapping[str, str]) -> Embedder:
    """The provider `name` as configured, not yet asked anything; EmbeddingError when it is not configured."""
    if name == "local":
        try:
            from server.index.embeddings.local import LocalEmbedder
        except ImportError as exc:  # the server extra is not installed
            raise EmbeddingError(f"the local model's runtime is not installed ({exc.name})") from None
        return LocalEmbedder(runtime="torch" if settings.runtime == "torch" else "onnx", local=settings.local_model)
    remote = settings.voyage if name == "voyage" else settings.openai
    key_name = f"{name.upper()}_API_KEY"
    api_key = read_secret(env, key_name)
    if api_key is None:
        raise EmbeddingError(f"not configured (set {key_name} or {key_name}_FILE)")
    dimensions = remote.dimensions or KNOWN_DIMENSIONS.get(remote.model)
    if dimensions is None and not settings.probe:
        raise EmbeddingError(f"unknown dimensions for model {remote.model}; set MEMORY_{name.upper()}_DIMENSIONS")
    from server.index.tokens import WordPieceTokenizer

    kind: type[HttpEmbedder] = VoyageEmbedder if name == "voyage" else OpenAIEmbedder
    embedder = kind(
        api_key=api_key,
        model=remote.model,
        dimensions=dimensions or 0,
        base_url=remote.base_url,
        tokenizer=WordPieceTokenizer.default(),
        max_tokens=REMOTE_MAX_TOKENS[name],
        options=settings.http,
    )
    return embedder
