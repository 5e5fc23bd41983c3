"""What an index is configured with: chunking, scanning, fusion, search defaults, the cache's cap, reranking."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from server.index.chunker import ChunkerConfig
from server.index.fusion import FusionWeights
from server.index.rerank import Reranker
from server.index.scan import ScanConfig
from server.index.tuning import SearchDefaults


@dataclass(frozen=True)
class EngineSettings:
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    scan: ScanConfig = field(default_factory=ScanConfig)
    weights: FusionWeights = field(default_factory=FusionWeights)
    search: SearchDefaults = field(default_factory=SearchDefaults)
    cache_max_entries: int = 0  # the embedding cache's cap in vectors; 0: no cap (unused ones age out)
    reranker: Reranker | None = None  # built at start from the server's key (Settings.select_reranker)
    per_index: Mapping[str, EngineSettings] = field(default_factory=dict)  # [indexes.NAME] (server.index_settings)

    def for_index(self, name: str) -> EngineSettings:
        return self.per_index.get(name, self)
