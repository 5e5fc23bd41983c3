"""Exploring index-time representations for recall (issue 16, goals 1 and 2): more than one vector per chunk.

The ranking is explore_prf.py's replay of the product (fusion over 40 / 100 candidates a side, vector feedback
from the best chunk at 0.25, place merging on LoCoMo, documents by best chunk on SciFact), with only the vector
side's score of a chunk changed. Representations, all from the default local model through LocalEmbedder:
- `sent`: every chunk cut into sentences (a line is never joined to the next; pieces under MIN_WORDS words join a
  neighbour), each embedded alone; `pack`: a line's sentences packed up to PACK_TOKENS tokens; `sentctx`,
  `packctx`: the same with the chunk's heading context in front, as the chunk has it;
- `win`: the chunk embedded with its neighbours' nearest sentence on each side (same file), heading context first;
- `late`: late chunking (multivec_late.py), the chunk read with its neighbours and pooled over its own tokens;
- with no model call: the mean of a chunk's unit vectors, the chunk vector smoothed with its neighbours' (`nb`)
  or its file's mean (`file`).
A chunk's vector score is then the chunk cosine (default), max(chunk, best unit), a blend
w * chunk + (1 - w) * best unit, a blend with the mean of the best k units, or the best unit alone.

Chosen on the tuning halves (LoCoMo conv-26/30/41, SciFact odd query ids), reported on the held-out halves
(conv-42/43, even ids) and the full sets, against the default replayed in the same run; the held-out difference
comes with a paired bootstrap (95% interval over questions). Embeddings are cached under bench/.cache/multivec/.

    .venv/bin/python bench/explore_multivec.py [locomo] [subset] [scifact] [--kinds sent,...,late] [--cost N]

Results: bench/results/multivec.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import apsw
import numpy as np
from common import CACHE
from explore_prf import Data, Ranker, bootstrap, halves, prepare_locomo, prepare_scifact, product_params
from multivec_late import late_vectors

from server.index.embeddings.base import normalise
from server.index.embeddings.local import LocalEmbedder

WORK = CACHE / "multivec"
MIN_WORDS = 4  # a sentence piece shorter than this joins the one before (greetings, "Wow!")
PACK_TOKENS = 64  # `pack`: sentences of one line packed up to this many tokens
# A sentence ends at . ! ? before a space and a capital or digit, or glued to a capitalised word (SciFact's
# abstracts lost the space: "diabetes.We sought").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|(?<=[a-z0-9)][.!?])(?=[A-Z][a-z])")
MAIN = {"locomo": ("r@50lines", "r@100lines"), "scifact": ("ndcg",), "subset": ("ndcg",)}

WHOLE = {  # representations that replace the chunk vector by one other vector a chunk
    "win": "chunk with its neighbours' nearest sentence, instead",
    "late": "late chunking: pooled over the chunk's tokens of a read with its neighbours, instead",
}

_EMBEDDER: list[LocalEmbedder] = []


def embedder() -> LocalEmbedder:
    if not _EMBEDDER:
        _EMBEDDER.append(LocalEmbedder())
    return _EMBEDDER[0]


# ---------------------------------------------------------------------------------------------------------------
# Units: the stored chunks, their sentences, their neighbours


@dataclasses.dataclass
class Chunks:
    context: list[str]  # per row: the heading context the chunk was embedded with
    text: list[str]  # per row: the chunk's text
    prev: list[int]  # per row: the previous chunk of the same file (-1: none)
    next: list[int]
    file: list[int]  # per row: a file number
    units: dict[str, list[list[str]]]  # per kind ("sent", "pack"): per row, its units

    def embed_text(self, row: int, body: str) -> str:
        return f"{self.context[row]}\n{body}" if self.context[row] else body


def sentences(text: str) -> list[str]:
    """A chunk's sentences: each line cut at sentence ends; a piece under MIN_WORDS words joins its neighbour."""
    units: list[str] = []
    for line in text.splitlines():
        pieces, pending = [], ""
        for piece in _SENTENCE_END.split(line.strip()):
            if len(piece.split()) >= MIN_WORDS:
                pieces.append(pending + piece)
                pending = ""
            elif pieces:
                pieces[-1] += " " + piece
            elif piece:
                pending += piece + " "
        units += pieces or ([pending.strip()] if pending.strip() else [])
    return units or [text.strip() or text]


def packed(text: str) -> list[str]:
    """A chunk's lines, each cut into runs of whole sentences of at most PACK_TOKENS tokens (a turn, a few
    sentences of a paragraph)."""
    count = embedder().tokenizer.count
    units: list[str] = []
    for line in text.splitlines():
        run = ""
        for piece in _SENTENCE_END.split(line.strip()):
            if run and count(run + " " + piece) > PACK_TOKENS:
                units.append(run)
                run = piece
            else:
                run = f"{run} {piece}" if run else piece
        if run:
            units.append(run)
    return units or [text.strip() or text]


def chunks_of(data: Data) -> Chunks:
    n = len(data.matrix)
    context, text, where = [""] * n, [""] * n, [(0, 0, 0)] * n
    files: dict[tuple[str, int], int] = {}
    for db, row_of in data.row_ids.items():
        conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
        for chunk, file_id, start, ctx, body in conn.execute(
            "SELECT id, file_id, start_line, context, text FROM chunks"
        ):
            if chunk in row_of:
                row = row_of[chunk]
                context[row], text[row] = ctx, body
                where[row] = (files.setdefault((db, file_id), len(files)), start, row)
        conn.close()
    prev, nxt = [-1] * n, [-1] * n
    ordered = sorted(range(n), key=lambda r: where[r])
    for a, b in itertools.pairwise(ordered):
        if where[a][0] == where[b][0]:
            prev[b], nxt[a] = a, b
    units = {"sent": [sentences(t) for t in text], "pack": [packed(t) for t in text]}
    return Chunks(context, text, prev, nxt, [w[0] for w in where], units)


# ---------------------------------------------------------------------------------------------------------------
# Embedding, cached


@dataclasses.dataclass
class Embedded:
    vectors: np.ndarray
    sequences: int
    tokens: int  # what the model reads: at most 256 a sequence, special tokens included
    seconds: float  # encode time when first embedded (the machine is shared: a rough figure)


def embed_cached(name: str, texts: Sequence[str]) -> Embedded:
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    vectors, meta = WORK / f"{name}-{digest}.npy", WORK / f"{name}-{digest}.json"
    if vectors.exists() and meta.exists():
        return Embedded(np.load(vectors), **json.loads(meta.read_text()))
    model = embedder()
    tokens = sum(min(256, model.tokenizer.count(t) + 2) for t in texts)
    started = time.perf_counter()
    parts = []
    for at in range(0, len(texts), 1024):
        parts.append(np.asarray(model.embed(texts[at : at + 1024])))
        print(f"  {name}: {at + len(parts[-1])}/{len(texts)}", flush=True)
    seconds = time.perf_counter() - started
    out = Embedded(np.concatenate(parts).astype(np.float32), len(texts), tokens, round(seconds, 1))
    WORK.mkdir(parents=True, exist_ok=True)
    np.save(vectors, out.vectors)
    meta.write_text(json.dumps({"sequences": out.sequences, "tokens": out.tokens, "seconds": out.seconds}))
    return out


def window_texts(chunks: Chunks) -> list[str]:
    """Each chunk with the nearest sentence of its neighbours (same file) around it."""
    out = []
    for r, body in enumerate(chunks.text):
        before = chunks.units["sent"][chunks.prev[r]][-1] + "\n" if chunks.prev[r] >= 0 else ""
        after = "\n" + chunks.units["sent"][chunks.next[r]][0] if chunks.next[r] >= 0 else ""
        out.append(chunks.embed_text(r, before + body + after))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Scores


class UnitRanker(Ranker):
    """The replay with a chunk's vector score taken from its sentences' vectors as well as its own."""

    def __init__(self, data: Data, units: np.ndarray, owner: np.ndarray, score: Callable) -> None:
        super().__init__(data)
        self.units = units
        counts = np.bincount(owner, minlength=len(data.matrix))
        width = int(counts.max())
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        order = np.argsort(owner, kind="stable")
        slot = np.arange(len(owner)) - starts[owner[order]]
        self.grid = np.full((len(data.matrix), width), -1, dtype=np.int64)
        self.grid[owner[order], slot] = order
        self.score = score

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        chunk = self.data.matrix @ vector
        per_unit = np.append(self.units @ vector, -np.inf)  # index -1: padding
        best_first = -np.sort(-per_unit[self.grid], axis=1)
        return self.score(chunk, best_first)  # type: ignore[no-any-return]


def top_mean(best_first: np.ndarray, k: int) -> np.ndarray:
    taken = best_first[:, :k]
    finite = np.isfinite(taken)
    return np.where(finite, taken, 0.0).sum(axis=1) / np.maximum(1, finite.sum(axis=1))


SCORES: dict[str, Callable] = {
    "max(chunk, best sentence)": lambda c, s: np.maximum(c, s[:, 0]),
    "0.7 chunk + 0.3 best sentence": lambda c, s: 0.7 * c + 0.3 * s[:, 0],
    "0.5 chunk + 0.5 best sentence": lambda c, s: 0.5 * c + 0.5 * s[:, 0],
    "0.3 chunk + 0.7 best sentence": lambda c, s: 0.3 * c + 0.7 * s[:, 0],
    "best sentence alone": lambda c, s: s[:, 0],
    "0.5 chunk + 0.5 mean of best 2": lambda c, s: 0.5 * c + 0.5 * top_mean(s, 2),
    "0.5 chunk + 0.5 mean of best 3": lambda c, s: 0.5 * c + 0.5 * top_mean(s, 3),
}


def smoothed(data: Data, chunks: Chunks, a: float, by_file: bool) -> np.ndarray:
    """Each chunk vector plus `a` x its neighbours' mean (or its file's mean), normalised: no model call."""
    m = data.matrix
    if by_file:
        files = np.asarray(chunks.file)
        sums = np.zeros((files.max() + 1, m.shape[1]), dtype=np.float32)
        np.add.at(sums, files, m)
        other = sums[files] / np.bincount(files)[files][:, None]
    else:
        prev, nxt = np.asarray(chunks.prev), np.asarray(chunks.next)
        both = np.where(prev[:, None] >= 0, m[prev], 0) + np.where(nxt[:, None] >= 0, m[nxt], 0)
        other = both / np.maximum(1, (prev >= 0).astype(int) + (nxt >= 0))[:, None]
    return np.asarray(normalise(m + a * other))


# ---------------------------------------------------------------------------------------------------------------
# The run


def unit_texts(chunks: Chunks, kind: str) -> tuple[list[str], np.ndarray]:
    """Every unit's embedded text (`sent`, `pack`; `...ctx`: the heading context in front) and its chunk row."""
    units = chunks.units[kind.removesuffix("ctx")]
    owner = np.asarray([r for r, us in enumerate(units) for _ in us])
    if kind.endswith("ctx"):
        return [chunks.embed_text(r, u) for r, us in enumerate(units) for u in us], owner
    return [u for us in units for u in us], owner


def token_cost(texts: Sequence[str]) -> tuple[int, int]:
    """Sequences and tokens the model reads (at most 256 a sequence, special tokens included)."""
    count = embedder().tokenizer.count
    return len(texts), sum(min(256, count(t) + 2) for t in texts)


def variants(data: Data, chunks: Chunks, kinds: Sequence[str]) -> tuple[dict[str, Ranker], dict[str, tuple]]:
    """Every ranker to compare, and each representation's embedding cost: sequences, tokens, seconds."""
    costs = {"chunk": token_cost([chunks.embed_text(r, t) for r, t in enumerate(chunks.text)])}
    rankers: dict[str, Ranker] = {"default (chunk vector)": Ranker(data)}
    for kind in kinds:
        if kind in WHOLE:
            whole = (
                late_vectors(f"{data.name}-late", chunks, embedder().loaded(), WORK)
                if kind == "late"
                else embed_cached(f"{data.name}-win", window_texts(chunks))
            )
            costs[kind] = (whole.sequences, whole.tokens, whole.seconds)
            rankers[f"{kind}: {WHOLE[kind]}"] = Ranker(dataclasses.replace(data, matrix=whole.vectors))
            continue
        texts, owner = unit_texts(chunks, kind)
        units = embed_cached(f"{data.name}-{kind}", texts)
        costs[kind] = (units.sequences, units.tokens, units.seconds)
        for name, score in SCORES.items():
            rankers[f"{kind}: {name}"] = UnitRanker(data, units.vectors, owner, score)
        sums = np.zeros_like(data.matrix)
        np.add.at(sums, owner, units.vectors)
        rankers[f"{kind}: mean of units instead"] = Ranker(dataclasses.replace(data, matrix=normalise(sums)))
    for a in (0.1, 0.25, 0.5):
        rankers[f"nb: chunk + {a} neighbours' mean"] = Ranker(
            dataclasses.replace(data, matrix=smoothed(data, chunks, a, by_file=False))
        )
        rankers[f"file: chunk + {a} file's mean"] = Ranker(
            dataclasses.replace(data, matrix=smoothed(data, chunks, a, by_file=True))
        )
    return rankers, costs


def run(which: str, kinds: Sequence[str]) -> dict[str, Any]:
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    chunks = chunks_of(data)
    units = {k: sum(len(u) for u in us) for k, us in chunks.units.items()}
    print(f"{which}: {len(chunks.text)} chunks, units {units}, {len(data.texts)} queries", flush=True)
    rankers, costs = variants(data, chunks, kinds)
    params, groups = product_params(data), halves(data)
    per: dict[str, dict[str, list[dict[str, float]]]] = {}
    rows = {}
    for name, ranker in rankers.items():
        per[name] = {g: ranker.each(qs, params) for g, qs in groups.items()}
        row: dict[str, object] = {}
        for metric in MAIN[which]:
            for g in ("tune", "held"):
                row[f"{g} {metric}"] = float(np.mean([s[metric] for s in per[name][g]]))
            every = per[name]["tune"] + per[name]["held"]
            row[f"all {metric}"] = float(np.mean([s[metric] for s in every]))
            base = np.asarray([s[metric] for s in per["default (chunk vector)"]["held"]])
            delta = np.asarray([s[metric] for s in per[name]["held"]]) - base
            row[f"held {metric} delta 95%"] = bootstrap(delta)
        rows[name] = row
        print(name, json.dumps({k: v if isinstance(v, float) else [round(x, 4) for x in v] for k, v in row.items()}),
              flush=True)  # fmt: skip
    return {"chunks": len(chunks.text), "units": units, "costs": costs, "rows": rows}


def markdown(which: str, result: dict[str, Any]) -> str:
    """The run's table: each variant's tuning, held-out and full figures, the held-out difference's interval."""
    head = ["variant"]
    for metric in MAIN[which]:
        head += [f"tune {metric}", f"held {metric}", f"all {metric}", f"held delta 95% ({metric})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in result["rows"].items():
        cells = [name]
        for metric in MAIN[which]:
            low, high = row[f"held {metric} delta 95%"]
            cells += [f"{row[f'{g} {metric}']:.3f}" for g in ("tune", "held", "all")] + [f"{low:+.3f} .. {high:+.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    costs = ", ".join(f"{k} {n} sequences / {t} tokens" for k, (n, t, *_) in result["costs"].items())
    return "\n".join(lines) + f"\n\nEmbedded ({which}): {costs}\n"


def timed_cost(which: str, sample: int, kinds: Sequence[str]) -> dict:
    """Encode time of the same `sample` chunks as chunks and as each representation, interleaved, best of 2."""
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    chunks = chunks_of(data)
    step = max(1, len(chunks.text) // sample)
    rows = set(range(0, len(chunks.text), step)[:sample])
    windows = window_texts(chunks)
    texts = {"chunk": [chunks.embed_text(r, chunks.text[r]) for r in sorted(rows)]}
    for kind in kinds:
        if kind == "late":  # reads what `win` reads, at most 256 tokens a chunk
            continue
        if kind == "win":
            texts[kind] = [windows[r] for r in sorted(rows)]
        else:
            every, owner = unit_texts(chunks, kind)
            texts[kind] = [t for t, r in zip(every, owner, strict=True) if r in rows]
    model = embedder()
    model.embed(texts["chunk"][:64])  # load and warm up
    best: dict[str, float] = {}
    for _ in range(2):
        for name, batch in texts.items():
            started = time.perf_counter()
            model.embed(batch)
            best[name] = min(best.get(name, 1e9), time.perf_counter() - started)
    return {name: {"sequences": len(t), "seconds": round(best[name], 2)} for name, t in texts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="*", help="locomo, subset, scifact (all three unless --cost alone)")
    parser.add_argument("--kinds", default="sent,sentctx,pack,packctx,win,late", help="representations to embed")
    parser.add_argument("--cost", type=int, default=0, help="also time N chunks of the subset embedded each way")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    out: dict[str, dict] = {}
    for which in args.sets or ([] if args.cost else ["locomo", "subset", "scifact"]):
        out[which] = run(which, kinds)
        print(markdown(which, out[which]), flush=True)
    if args.cost:
        out["cost"] = timed_cost("subset", args.cost, kinds)
        print("cost", json.dumps(out["cost"]), flush=True)
    WORK.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (WORK / f"results-{stamp}.json").write_text(json.dumps(out, indent=1))
    print(f"written {WORK / f'results-{stamp}.json'}")


if __name__ == "__main__":
    sys.exit(main())
