"""Late chunking for explore_multivec.py: a chunk read by the model together with its neighbours' text, its vector
the mean of its own tokens' states only (the attention saw the neighbours; the pooling does not).

With a 256-token model the room is what the chunk leaves: (254 - its tokens) / 2 of each neighbour's text, the
end of the previous chunk and the start of the next (same file). A chunk near the budget gets no context.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from server.index.embeddings.base import normalise
from server.index.embeddings.onnx_export import INPUTS, OUTPUT
from server.index.embeddings.onnx_runtime import batches

if TYPE_CHECKING:
    from explore_multivec import Chunks, Embedded

BUDGET = 254


def _edge(tokenizer: Any, text: str, tokens: int, tail: bool) -> str:
    """At most `tokens` tokens of `text`: its end (`tail`) or its start, cut at a token."""
    if tokens <= 0 or not text:
        return ""
    offsets = [o for o in tokenizer.encode(text, add_special_tokens=False).offsets]
    if len(offsets) <= tokens:
        return text
    return text[offsets[-tokens][0] :] if tail else text[: offsets[tokens - 1][1]]


def late_inputs(chunks: Chunks, tokenizer: Any) -> list[tuple[str, int, int]]:
    """Per chunk: the text the model reads and the character span of the chunk's own embedded text in it."""
    out = []
    for r, body in enumerate(chunks.text):
        core = chunks.embed_text(r, body)
        room = max(0, BUDGET - len(tokenizer.encode(core, add_special_tokens=False).ids)) // 2
        before = _edge(tokenizer, chunks.text[chunks.prev[r]], room, tail=True) if chunks.prev[r] >= 0 else ""
        after = _edge(tokenizer, chunks.text[chunks.next[r]], room, tail=False) if chunks.next[r] >= 0 else ""
        head = before + "\n" if before else ""
        out.append((head + core + ("\n" + after if after else ""), len(head), len(head) + len(core)))
    return out


def late_vectors(name: str, chunks: Chunks, encoder: Any, cache: Any) -> Embedded:
    """Every chunk's late-chunked vector (cached in `cache`/`name`-digest.npy)."""
    from explore_multivec import Embedded

    inputs = late_inputs(chunks, encoder.tokenizer)
    digest = hashlib.sha256("\x00".join(f"{t}\x01{a}\x01{b}" for t, a, b in inputs).encode()).hexdigest()[:16]
    path, meta = cache / f"{name}-{digest}.npy", cache / f"{name}-{digest}.json"
    if path.exists() and meta.exists():
        return Embedded(np.load(path), **json.loads(meta.read_text()))
    encodings = encoder.tokenizer.encode_batch([t for t, _, _ in inputs])
    started = time.perf_counter()
    vectors = np.zeros((len(inputs), 384), dtype=np.float32)
    for group in batches([len(e.ids) for e in encodings]):
        length = len(encodings[group[0]].ids)
        ids = np.zeros((len(group), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        own = np.zeros((len(group), length), dtype=np.float32)
        for row, index in enumerate(group):
            encoding, (_, start, end) = encodings[index], inputs[index]
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
            for position, (a, b) in enumerate(encoding.offsets):
                own[row, position] = float(b > a and a >= start and b <= end)
        (hidden,) = encoder.session.run([OUTPUT], dict(zip(INPUTS, (ids, mask), strict=True)))
        summed = (hidden * own[:, :, None]).sum(axis=1)
        vectors[group] = summed / np.maximum(own.sum(axis=1), 1.0)[:, None]
    seconds = round(time.perf_counter() - started, 1)
    tokens = sum(len(e.ids) for e in encodings)
    out = Embedded(np.asarray(normalise(vectors)), len(inputs), tokens, seconds)
    np.save(path, out.vectors)
    meta.write_text(json.dumps({"sequences": out.sequences, "tokens": out.tokens, "seconds": out.seconds}))
    return out
