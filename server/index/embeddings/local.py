"""The default provider: the packaged all-MiniLM-L6-v2 run locally, no network.

Two runtimes give the same vectors (cosine >= 0.9999, tests/server/index/test_onnx_runtime.py), so they share one
vector identity and switching never rebuilds an index: `onnx` (the default: onnxruntime on the install-time ONNX
export; no torch in the process, a start in about a second) and `torch` (sentence-transformers, imported only when
chosen: MEMORY_EMBEDDING_RUNTIME=torch, for platforms without an onnxruntime wheel).

The int8 quantisation of the same weights (MEMORY_LOCAL_MODEL=all-MiniLM-L6-v2-int8, the default; onnx runtime
only) is another model: its vectors differ a little (mean cosine 0.996 to the float32 ones), so it has its own model
id and an index built with one is rebuilt in the background for the other. Its weights are 7-bit, so that CPUs with
and without VNNI give the same vectors (cosine 0.998 or more; tests/server/index/test_int8_cpus.py).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from server.index.embeddings.base import InputKind, Tokenizer, Vectors, normalise
from server.index.errors import EmbeddingError, EmbeddingUnavailableError
from server.index.model_package import (
    DEFAULT_LOCAL_MODEL,
    WEIGHTS_SHA256,
    LocalModel,
    default_local_model,
    local_model,
    onnx_model_path,
    packaged_model_dir,
    verify_weights,
)
from server.index.tokens import WordPieceTokenizer

log = logging.getLogger(__name__)

DIMENSIONS = 384
# The model reads 256 WordPiece tokens including [CLS] and [SEP]; anything past that is silently dropped.
MAX_TOKENS = 254
ENCODE_BATCH = 32
Runtime = Literal["onnx", "torch"]
RUNTIMES: tuple[Runtime, ...] = ("onnx", "torch")


class Encoder(Protocol):
    """A loaded model: texts in, L2-normalised vectors out."""

    runtime: str
    detail: str  # what runs it, for the self-check and the log

    def encode(self, texts: Sequence[str]) -> Vectors: ...


# One loaded model per process, runtime and local model, whoever asks: loading costs time and memory.
_MODELS: dict[tuple[Path, str, str], Encoder] = {}
_VERIFIED: set[Path] = set()
_MODELS_LOCK = threading.Lock()


class TorchEncoder:
    """sentence-transformers on the CPU (torch and transformers are imported here, and only here)."""

    runtime = "torch"

    def __init__(self, model_dir: Path) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            import sentence_transformers
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            self.model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        except ImportError as exc:  # the image leaves torch out: its default runtime does not need it
            raise EmbeddingUnavailableError(
                f"the torch runtime needs {exc.name or 'sentence-transformers'}, which is not installed here; "
                "use MEMORY_EMBEDDING_RUNTIME=onnx"
            ) from exc
        except Exception as exc:  # any failure to load means: no local model here
            raise EmbeddingUnavailableError(f"cannot load the local model: {type(exc).__name__}") from exc
        if self.model.get_embedding_dimension() != DIMENSIONS:
            raise EmbeddingUnavailableError("the local model has unexpected dimensions")
        self.detail = f"sentence-transformers {sentence_transformers.__version__}"

    def encode(self, texts: Sequence[str]) -> Vectors:
        vectors = self.model.encode(
            list(texts),
            batch_size=ENCODE_BATCH,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalise(vectors)


def load_encoder(model_dir: Path, runtime: Runtime, model: LocalModel = DEFAULT_LOCAL_MODEL) -> Encoder:
    if runtime == "torch":
        return TorchEncoder(model_dir)
    from server.index.embeddings.onnx_runtime import OnnxEncoder

    return OnnxEncoder(model_dir, onnx_model_path(model), WEIGHTS_SHA256, precision=model.precision)


class LocalEmbedder:
    """The packaged model on the CPU. It loads once, on first use, and is shared by all threads."""

    provider = "local"
    dimensions = DIMENSIONS
    max_tokens = MAX_TOKENS

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        verify: bool = True,
        runtime: Runtime = "onnx",
        local: str | None = None,  # None: the default for the runtime (float32 on torch)
    ) -> None:
        if runtime not in RUNTIMES:
            raise EmbeddingUnavailableError(f"unknown embedding runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
        self.local = local_model(local) if local is not None else default_local_model(runtime)
        if runtime == "torch" and not self.local.torch:
            raise EmbeddingUnavailableError(f"the local model {local} runs on MEMORY_EMBEDDING_RUNTIME=onnx only")
        self.runtime: Runtime = runtime
        self.model = self.local.model_id  # the vector identity: the runtimes share it, the local models do not
        self.model_dir = model_dir or packaged_model_dir()
        if not (self.model_dir / "model.safetensors").is_file():
            raise EmbeddingUnavailableError(f"no model weights under {self.model_dir}")
        if verify and self.model_dir not in _VERIFIED:
            verify_weights(self.model_dir)
            _VERIFIED.add(self.model_dir)
        self.tokenizer: Tokenizer = WordPieceTokenizer(self.model_dir / "tokenizer.json")

    def _load(self) -> Encoder:
        key = (self.model_dir, self.runtime, self.local.name)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = load_encoder(self.model_dir, self.runtime, self.local)
                log.info("loaded local embedding model %s (%s)", self.model, _MODELS[key].detail)
            return _MODELS[key]

    def loaded(self) -> Encoder:
        """The model as loaded (loading it if it is not yet): which runtime really runs it."""
        return self._load()

    def warm_up(self) -> None:
        """Load the model now instead of on the first embed."""
        self._load()

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if not texts:
            return normalise(np.zeros((0, DIMENSIONS), dtype=np.float32))
        model = self._load()
        try:
            vectors = model.encode(texts)
        except Exception as exc:
            raise EmbeddingError(f"local embedding failed: {type(exc).__name__}") from exc
        return normalise(vectors)
