"""Reference vectors: what each local model gives for a few fixed sentences, recorded on a CPU with AVX-512 VNNI.

Embedding them again shows whether this machine computes the model it is meant to: another CPU's arithmetic (the
8-bit int8 model saturated its sums on CPUs without VNNI), an export of other weights, another onnxruntime.
`memory-server self-check` (the end of the image build) compares, and so do the tests, on this CPU and on an
emulated one without VNNI (tests/server/index/test_int8_cpus.py).

After a change of a local model (a new int8 recipe, a new export), record them again on a CPU with VNNI:

    .venv/bin/python -m server.index.embeddings.reference
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from server.index.embeddings.base import Embedder, Vectors
from server.index.errors import EmbeddingUnavailableError

REFERENCE_FILE = Path(__file__).with_name("reference_vectors.json")
# The least cosine of a sentence's vector to its recorded one. The integer products are exact on every CPU; the float
# operators between them (layer norms, GELU, softmax) round differently at other vector widths, and an activation
# that lands on the other side of a quantisation step moves the rest a little: 0.9983 at least over 40 texts on an
# emulated AVX2 CPU (0.9874 with the 8-bit weights before). The runtimes of float32 agree to 0.9999.
LEAST_COSINE = 0.997
SENTENCES = (
    "The staging database is rebuilt every Sunday at 02:00 UTC; do not run migrations then.",
    "Decision: we keep SQLite for the index and put the markdown files first, because they are the truth.",
    "Alice prefers small commits with clear messages, and reviews pull requests before lunch.",
    "# 2026-03-14\n\n- Fixed the flaky upload test: it waited on a sleep instead of the server's event.\n"
    "- Next: measure search latency at a million chunks, p50 and p95, and write the results to bench/results.",
    "ok",
)


def recorded(model_id: str) -> Vectors:
    """The vectors recorded for `model_id`, one per sentence of SENTENCES."""
    data = json.loads(REFERENCE_FILE.read_text(encoding="utf-8"))
    if tuple(data["sentences"]) != SENTENCES:
        raise EmbeddingUnavailableError(f"{REFERENCE_FILE.name} was recorded for other sentences: record it again")
    if model_id not in data["vectors"]:
        raise EmbeddingUnavailableError(f"no reference vectors for {model_id} in {REFERENCE_FILE.name}: record them")
    return np.array(data["vectors"][model_id], dtype=np.float32)


def agreement(found: Vectors, model_id: str) -> float:
    """The least cosine of `found` (SENTENCES embedded, in order) to the vectors recorded for `model_id`."""
    return float(np.min(np.sum(found * recorded(model_id), axis=1)))


def check(embedder: Embedder) -> float:
    """Embed SENTENCES with `embedder` and return the least cosine to its recorded vectors; raises
    EmbeddingUnavailableError when it is under LEAST_COSINE."""
    least = agreement(embedder.embed(list(SENTENCES)), embedder.model)
    if least < LEAST_COSINE:
        raise EmbeddingUnavailableError(
            f"{embedder.model} embeds its reference sentences at a cosine of {least:.4f} to the recorded vectors "
            f"(at least {LEAST_COSINE} expected): this machine computes another model"
        )
    return least


def record(embedders: Sequence[Embedder]) -> None:
    """Write every embedder's vectors of SENTENCES to REFERENCE_FILE, a vector a line."""
    rows = {
        embedder.model: [json.dumps([round(float(x), 7) for x in row]) for row in embedder.embed(list(SENTENCES))]
        for embedder in embedders
    }
    models = ",\n".join(
        f"  {json.dumps(model)}: [\n   " + ",\n   ".join(lines) + "\n  ]" for model, lines in rows.items()
    )
    about = "each local model's vectors of the sentences, on a CPU with VNNI (server/index/embeddings/reference.py)"
    head = json.dumps({"about": about, "sentences": SENTENCES}, indent=1)[:-2]
    REFERENCE_FILE.write_text(f'{head},\n "vectors": {{\n{models}\n }}\n}}\n', encoding="utf-8")


def has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU adds int8 products into int32 (AVX-512 VNNI or AVX-VNNI), as Linux reports it."""
    flags = cpuinfo.read_text(encoding="utf-8").split() if cpuinfo.is_file() else []
    return "avx512_vnni" in flags or "avx_vnni" in flags


def main() -> int:
    from server.index.embeddings.local import LocalEmbedder
    from server.index.model_package import LOCAL_MODELS

    if not has_vnni():
        print("record on a CPU with VNNI: its vectors are the ones every other CPU must meet", file=sys.stderr)
        return 2
    record([LocalEmbedder(local=name) for name in LOCAL_MODELS])
    print(f"recorded {', '.join(LOCAL_MODELS)} in {REFERENCE_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
