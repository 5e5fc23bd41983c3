"""The server's configuration, read from the environment in exactly one place (`Settings.from_env`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from server.index.embeddings.base import Embedder
from server.index.embeddings.select import EmbeddingSettings, select_embedder
from server.index.engine import EngineSettings
from server.index.errors import InvalidArgumentError
from server.index.fusion import FusionWeights
from server.index.scan import DEFAULT_MAX_FILE_BYTES, ScanConfig

LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("data")
    keys_dir: Path = Path("keys")
    log_level: str = "warning"
    host: str = "127.0.0.1"
    port: int = 8765
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        log_level = env.get("MEMORY_LOG_LEVEL", "warning").lower()
        if log_level not in LOG_LEVELS:
            raise InvalidArgumentError(f"MEMORY_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
        weights = FusionWeights(
            vector=_number(env, "MEMORY_WEIGHT_VECTOR", FusionWeights.vector),
            keyword=_number(env, "MEMORY_WEIGHT_KEYWORD", FusionWeights.keyword),
        )
        scan = ScanConfig(max_file_bytes=int(_number(env, "MEMORY_MAX_FILE_BYTES", DEFAULT_MAX_FILE_BYTES)))
        return cls(
            data_dir=Path(env.get("MEMORY_DATA_DIR", "data")),
            keys_dir=Path(env.get("MEMORY_KEYS_DIR", "keys")),
            log_level=log_level,
            host=env.get("MEMORY_HOST") or "127.0.0.1",
            port=_port(env),
            embedding=EmbeddingSettings.from_env(env),
            engine=EngineSettings(scan=scan, weights=weights),
        )

    def select_embedder(self, env: Mapping[str, str]) -> tuple[Embedder | None, list[str]]:
        """The first usable provider in the configured order, and why the ones before it were skipped."""
        return select_embedder(self.embedding, env)


def _port(env: Mapping[str, str]) -> int:
    raw = env.get("MEMORY_PORT") or "8765"
    if not (raw.isascii() and raw.isdigit()) or not 0 <= int(raw) <= 65535:
        raise InvalidArgumentError(f"MEMORY_PORT must be a TCP port (0-65535), not {raw!r}")
    return int(raw)


def _number(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgumentError(f"{key} must be a number, not {raw!r}") from None
    if value < 0:
        raise InvalidArgumentError(f"{key} must not be negative")
    return value
