"""Exploring hits trimmed to the lines that answer (issue 16, goal 1): a place's line range cut down to its lines
nearest the query, so the 50 / 100 lines an agent reads hold more places.

Replays the product's ranking (explore_prf.py, vector feedback on), merges places, then scores each line of a place
by its own vector's cosine to the query and keeps the span from the first to the last line within `delta` of the
place's best line, widened by `context` lines. Tuned on conv-26/30/41, reported on conv-42/43.

    .venv/bin/python bench/explore_trim.py
"""

from __future__ import annotations

import json
import pickle
from collections import Counter

import numpy as np
from bench_locomo import LOCOMO, build
from explore_prf import WORK, Ranker, prepare_locomo, product_params

from server.index.places import Span, merge_places


def line_vectors() -> dict[tuple[str, int], np.ndarray]:
    cached = WORK / "trim-lines.pickle"
    if cached.exists():
        return pickle.loads(cached.read_bytes())  # type: ignore[no-any-return]
    from server.index.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder()
    keys, texts = [], []
    for sample in json.loads((LOCOMO / "locomo-dev.json").read_text()):
        conversation = build(sample)
        for path, text in conversation.files.items():
            for n, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    keys.append((conversation.name + "/" + path, n))
                    texts.append(line)
    vectors = np.asarray(embedder.embed(texts, kind="document"))
    out = {k: vectors[i] for i, k in enumerate(keys)}
    cached.write_bytes(pickle.dumps(out))
    return out


def main() -> None:
    from bench_locomo import recall_of

    data = prepare_locomo()
    lines = line_vectors()
    ranker = Ranker(data)
    spans, turns, wanted = data.extra["spans"], data.extra["turns"], data.extra["wanted"]  # type: ignore[index]
    product = product_params(data)
    ranked_all = [ranker.rank(q, product)[0] for q in range(len(data.texts))]
    variants = [("none", None, 0, 0, 40), ("none", None, 0, 0, 100)]
    variants += [("trim", d, c, mn, lim) for d in (0.0, 0.05, 0.1, 0.15, 0.2) for c in (0, 1) for mn in (0, 4)
                 for lim in (40, 100)]  # fmt: skip
    for kind, delta, context, min_len, limit in variants:
        totals = {"tune": Counter(), "held": Counter()}
        counts = Counter()
        for q, ranked in enumerate(ranked_all):
            places = merge_places([Span(r, *spans[r]) for r in ranked], limit)
            hits = []
            for pl in places:
                start, end = pl.start_line, pl.end_line
                if delta is not None and end - start + 1 > min_len:
                    scored = [(float(lines[(pl.path, n)] @ data.queries[q]), n)
                              for n in range(start, end + 1) if (pl.path, n) in lines]  # fmt: skip
                    if scored:
                        best = max(s for s, _ in scored)
                        keep = [n for s, n in scored if s >= best - delta]
                        start, end = max(start, min(keep) - context), min(end, max(keep) + context)
                hits.append({"path": pl.path, "start_line": start, "end_line": end})
            got = recall_of(hits, wanted[q], turns)
            if got:
                totals[data.group[q]].update({k: got[k] for k in ("r@10", "r@50lines", "r@100lines")})
                counts[data.group[q]] += 1
        row = {g: {k: round(v / counts[g], 4) for k, v in t.items()} for g, t in totals.items()}
        print(kind, delta, context, min_len, limit, json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
