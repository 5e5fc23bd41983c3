"""Questions embedded as statements (issue 16, goal 1): LoCoMo's questions ask ("When did Caroline go to the LGBTQ
support group?") where the evidence tells ("I went to a LGBTQ support group yesterday"). Each question is embedded
again with its leading question words and auxiliaries and its question mark taken off ("Caroline go to the LGBTQ
support group"), alone or mixed into the question's own vector, and the product's ranking is replayed
(explore_prf.py: fusion over 40 candidates a side, vector feedback from the best chunk at 0.25, place merging),
tuned on conv-26/30/41 and reported on conv-42/43. Both the questions and their rewrites are embedded by the
current default model.

    .venv/bin/python bench/explore_rewrite.py

`names` replays instead the product's rule of `server.index.shared_names`: the names found in half a
conversation's chunks or more (its speakers) left out of the question's vector, alone or mixed in as above:

    .venv/bin/python bench/explore_rewrite.py names

Results: bench/results/rewrite.md (written by hand from the printed table).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time

import apsw
import numpy as np
from explore_prf import Ranker, prepare_locomo, product_params, replay_row

from server.index.common_terms import TermCounts, fts_counter
from server.index.embeddings.local import LocalEmbedder
from server.index.shared_names import query_texts

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


def name_blind(text: str, db: apsw.Connection, held: TermCounts) -> str:
    """`text` without the names `db`'s chunks share. The product embeds it beside `text` and takes the mean of both
    vectors: the "rewrite share 0.5" row."""
    return query_texts(text, *held.remembering(*fts_counter(db)))[-1]


def without_names(texts: list[str], dbs: list[str]) -> list[str]:
    """Each question as the product embeds it: without the names its conversation's chunks share."""
    counts = {db: TermCounts() for db in set(dbs)}
    out = []
    for text, path in zip(texts, dbs, strict=True):
        db = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        out.append(name_blind(text, db, counts[path]))
        db.close()
    changed = [(a, b) for a, b in zip(texts, out, strict=True) if a != b]
    print(f"{len(changed)} of {len(texts)} questions lose a name, e.g. {changed[:3]}", flush=True)
    return out


def embedding_cost(embedder: LocalEmbedder, texts: list[str], pairs: list[str], runs: int = 300) -> None:
    """p50 and p95 of embedding a question alone and with its rewrite, interleaved so both see the same load."""
    times: dict[int, list[float]] = {1: [], 2: []}
    for n in range(runs):
        for batch in ([texts[n % len(texts)]], [texts[n % len(texts)], pairs[n % len(texts)]]):
            started = time.perf_counter()
            embedder.embed(batch, kind="query")
            times[len(batch)].append((time.perf_counter() - started) * 1000)
    for size, spent in times.items():
        spent.sort()
        p50, p95 = spent[len(spent) // 2], spent[len(spent) * 95 // 100]
        print(f"embedding {size} text(s): p50 {p50:.2f} ms, p95 {p95:.2f} ms")


def main() -> None:
    embedder = LocalEmbedder()
    data = prepare_locomo()
    data = dataclasses.replace(data, queries=np.asarray(embedder.embed(data.texts, kind="query")))
    rewrite = without_names if sys.argv[1:] == ["names"] else lambda texts, _dbs: [as_statement(t) for t in texts]
    rewrites = rewrite(data.texts, data.db)
    rewritten = np.asarray(embedder.embed(rewrites, kind="query"))
    embedding_cost(embedder, data.texts, rewrites)
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
