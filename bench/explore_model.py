"""Another local model in the product's ranking (issue 16, goal 7): the same chunks, queries and BM25 lists as
explore_prf.py's replay, with every chunk and query embedded again by the default model and by a sentence-
transformers model folder, and the product's ranking (fusion over 40 / 100 candidates a side, vector feedback from
the best chunk at 0.25, place merging on LoCoMo, documents by best chunk on SciFact) replayed on each.

A chunk is embedded as the engine embeds it (its heading context, a newline, its text); queries as they are asked.
Embeddings are cached under bench/.cache/model/ by a digest of the model's name and the texts. The fusion's
vector weight (0.7) was chosen for the default model's similarities; `--weights` replays other weights for both.

    .venv/bin/python bench/explore_model.py MODEL_DIR [locomo] [subset] [scifact] [--weights 0.7 0.6 0.8]

Results: bench/results/stronger_model.md (written by hand from the printed table).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common import CACHE
from explore_multivec import chunks_of
from explore_prf import Params, Ranker, prepare_locomo, prepare_scifact, product_params, replay_row

from server.index.embeddings.local import LocalEmbedder

WORK = CACHE / "model"
BATCH = 64
PRODUCT_WEIGHT = Params().vw  # the fusion's vector weight in the product (the held-out deltas are against it)


def embed_cached(label: str, encode, texts: Sequence[str]) -> tuple[np.ndarray, float]:  # type: ignore[no-untyped-def]
    """`texts`' normalised vectors by `encode`, and the seconds it took (0 when they were cached)."""
    digest = hashlib.sha256((label + "\x00" + "\x00".join(texts)).encode()).hexdigest()[:16]
    path = WORK / f"{digest}.npy"
    if path.exists():
        return np.load(path), 0.0
    started = time.perf_counter()
    parts = []
    for at in range(0, len(texts), BATCH):
        parts.append(np.asarray(encode(list(texts[at : at + BATCH])), dtype=np.float32))
        if (at // BATCH) % 10 == 0:
            print(f"  {label}: {at + len(parts[-1])}/{len(texts)}", flush=True)
    vectors = np.concatenate(parts)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    seconds = time.perf_counter() - started
    WORK.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors, seconds


def run(which: str, models: dict[str, object], weights: Sequence[float]) -> None:
    """Each model (the default first) at each fusion weight (the product's first): the default at the product's
    weight is the baseline of every held-out difference."""
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    chunks = chunks_of(data)
    texts = [chunks.embed_text(r, chunks.text[r]) for r in range(len(chunks.text))]
    product = product_params(data)
    print(f"{which}: {len(texts)} chunks, {len(data.texts)} queries", flush=True)
    base: np.ndarray | None = None
    for label, (encode_doc, encode_query) in models.items():  # type: ignore[misc]
        matrix, seconds = embed_cached(f"{label}:doc", encode_doc, texts)
        queries, _ = embed_cached(f"{label}:query", encode_query, data.texts)
        if seconds:
            print(f"  {label}: {len(texts)} chunks in {seconds:.0f} s ({len(texts) / seconds:.1f} chunks/s)")
        ranker = Ranker(dataclasses.replace(data, matrix=matrix, queries=queries))
        for weight in weights:
            cells, held = replay_row(ranker, dataclasses.replace(product, vw=weight), base)
            base = held if base is None else base
            print(f"| {which} | {label} | {weight} | {cells} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a sentence-transformers model folder")
    parser.add_argument("sets", nargs="*", default=["locomo", "subset"])
    parser.add_argument("--weights", nargs="+", type=float, default=[PRODUCT_WEIGHT], help="besides 0.7")
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    other = SentenceTransformer(str(args.model), device="cpu")
    default = LocalEmbedder()

    def encode_other(texts: list[str]) -> np.ndarray:
        return other.encode(texts, batch_size=32, normalize_embeddings=True)  # type: ignore[no-any-return]

    models = {
        "default": (lambda t: default.embed(t, kind="document"), lambda t: default.embed(t, kind="query")),
        args.model.name: (encode_other, encode_other),
    }
    for which in args.sets:
        run(which, models, [PRODUCT_WEIGHT, *sorted(set(args.weights) - {PRODUCT_WEIGHT})])


if __name__ == "__main__":
    main()
