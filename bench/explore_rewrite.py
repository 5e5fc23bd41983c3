"""Questions embedded as statements (issue 16, goal 1): LoCoMo's questions ask ("When did Caroline go to the LGBTQ
support group?") where the evidence tells ("I went to a LGBTQ support group yesterday"). Each question is embedded
again with its leading question words and auxiliaries and its question mark taken off ("Caroline go to the LGBTQ
support group"), alone or mixed into the question's own vector, and the product's ranking is replayed
(explore_prf.py: fusion over 40 candidates a side, vector feedback from the best chunk at 0.25, place merging),
tuned on conv-26/30/41 and reported on conv-42/43. Both the questions and their rewrites are embedded by the
current default model.

    .venv/bin/python bench/explore_rewrite.py

Results: bench/results/rewrite.md (written by hand from the printed table).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
from explore_prf import Ranker, prepare_locomo, product_params, replay_row

from server.index.embeddings.local import LocalEmbedder

LEADING = frozenset(
    """what when where who whom whose which why how did does do is are was were has have had can could would will
    should might may many much long often kind of type""".split()
)
_TOKEN = re.compile(r"[\w'’-]+|[^\w\s]")
MIXES = (1.0, 0.5, 0.3)  # the rewrite's share of the query vector


def as_statement(question: str) -> str:
    """`question` without its leading question words and auxiliaries and without question marks."""
    words = _TOKEN.findall(question)
    start = 0
    while start < len(words) and words[start].lower() in LEADING:
        start += 1
    kept = [w for w in words[start:] if w != "?"]
    return " ".join(kept) or question


def main() -> None:
    embedder = LocalEmbedder()
    data = prepare_locomo()
    data = dataclasses.replace(data, queries=np.asarray(embedder.embed(data.texts, kind="query")))
    rewritten = np.asarray(embedder.embed([as_statement(t) for t in data.texts], kind="query"))
    product = product_params(data)
    cells, base = replay_row(Ranker(data), product, None)
    print(f"| questions as asked | {cells} |", flush=True)
    for mix in MIXES:
        queries = (1 - mix) * data.queries + mix * rewritten
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        cells, _ = replay_row(Ranker(dataclasses.replace(data, queries=queries)), product, base)
        print(f"| rewrite share {mix} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
