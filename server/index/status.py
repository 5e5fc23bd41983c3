"""What the engine reports about one index (`MemoryIndex.status`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from server.index.embeddings.chain import ProviderState
from server.index.rebuild_progress import RebuildSnapshot


@dataclass(frozen=True)
class IndexStatus:
    name: str
    root: str | None
    provider: str | None
    model: str | None
    dimensions: int | None
    files: dict[str, int]  # per source
    chunks: dict[str, int]
    pending_vectors: int
    vector_state: str  # "ready", "rebuilding", "unavailable", "off"
    search_modes: list[str]
    notice: str | None
    last_change: float | None
    database_bytes: int
    schema_version: int
    providers: list[ProviderState] = field(default_factory=list)  # the fallback order, each one's health
    rebuild: RebuildSnapshot | None = None  # a background vector rebuild's progress, while it runs
