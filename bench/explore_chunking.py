"""Exploring granularity on both sets: the chunker's token budget (MEMORY_CHUNK_TOKENS) and a cap on the lines of a
merged place, chosen on one half of each set and reported on the other (LoCoMo: chosen on conv-26/30/41, reported
on conv-42/43; SciFact has no train queries in ../shared/data/scifact, so its 300 test queries are split by id
parity: even ids choose, odd ids report).

Every budget is indexed in process with the engine (under bench/.cache/explore/), its vectors kept in one cache
keyed by the embedded text (seeded from bench_retrieval_scifact.py's index, read only), so a chunk that comes out
the same at two budgets is embedded once. Rankings are replayed from the full similarity and BM25 lists
(explore_locomo.py, explore_scifact.py), which reproduce the benches' figures.

    .venv/bin/python bench/explore_chunking.py locomo 64 96 128 192 254
    .venv/bin/python bench/explore_chunking.py scifact 128 254
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace

import apsw
import numpy as np
from bench_locomo import recall_of
from bench_retrieval_scifact import data_folder, evaluate, load
from common import CACHE, RESULTS
from explore_locomo import prepare as prepare_locomo
from explore_scifact import prepare as prepare_scifact
from explore_scifact import product

from server.index.embeddings.base import InputKind, Vectors
from server.index.embeddings.local import LocalEmbedder
from server.index.engine import EngineSettings, MemoryIndex
from server.index.places import Place, Span, merge_places
from server.index.tuning import chunker_config

VECTORS = CACHE / "explore" / "vectors.sqlite3"
SEED = data_folder() / "indexes" / "scifact"
TUNE = ("conv-26", "conv-30", "conv-41")
OVERLAP = 40  # the default overlap, or just under half the budget where 40 is not allowed
PLACE_CAPS = (None, 15, 20)


class CachedEmbedder(LocalEmbedder):
    """The local model behind a cache of vectors keyed by the sha256 of the text, shared by every variant."""

    def __init__(self) -> None:
        super().__init__()
        VECTORS.parent.mkdir(parents=True, exist_ok=True)
        fresh = not VECTORS.exists()
        self.db = apsw.Connection(str(VECTORS))
        self.db.setbusytimeout(120_000)
        self.lock = threading.Lock()
        self.db.execute("CREATE TABLE IF NOT EXISTS v(hash TEXT PRIMARY KEY, vector BLOB)")
        if fresh and (SEED / "index.sqlite3").exists():
            seed = apsw.Connection(str(SEED / "index.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
            rows = seed.execute("SELECT hash, vector FROM embedding_cache WHERE model = ?", (self.model,))
            with self.db:
                self.db.executemany("INSERT OR IGNORE INTO v VALUES (?, ?)", list(rows))
            seed.close()
        self.embedded = 0

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        with self.lock:
            found: dict[str, bytes] = {}
            for start in range(0, len(keys), 500):
                batch = keys[start : start + 500]
                marks = ",".join("?" * len(batch))
                found.update(self.db.execute(f"SELECT hash, vector FROM v WHERE hash IN ({marks})", batch))
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in found}.items())
        if missing:
            vectors = super().embed([t for _, t in missing], kind=kind)
            self.embedded += len(missing)
            rows = [(k, v.tobytes()) for (k, _), v in zip(missing, vectors, strict=True)]
            with self.lock, self.db:
                self.db.executemany("INSERT OR IGNORE INTO v VALUES (?, ?)", rows)
            found.update(rows)
        return np.stack([np.frombuffer(found[k], dtype=np.float32) for k in keys])


def settings_for(budget: int, min_fill: float | None = None) -> EngineSettings:
    chunker = chunker_config(budget, min(OVERLAP, budget // 2 - 1))
    return EngineSettings(chunker=replace(chunker, min_fill=min_fill) if min_fill else chunker)


def variant(spec: str) -> tuple[str, int, float | None]:
    """`254` (a budget) or `254:0.4` (a budget and the chunker's min_fill) -> name, budget, min_fill."""
    budget, _, fill = spec.partition(":")
    return (f"budget-{budget}" + (f"-fill-{fill}" if fill else ""), int(budget), float(fill) if fill else None)


def locomo(specs: list[str], embedder: CachedEmbedder) -> None:
    for spec in specs:
        budget, (name, size, fill) = spec, variant(spec)
        corpora, cases = prepare_locomo(name, settings_for(size, fill), embedder)
        chunks = sum(len(c.ids) for c in corpora.values())
        for cap in PLACE_CAPS:
            halves = {}
            for name, keep in (("tune", True), ("held-out", False)):
                chosen = [c for c in cases if (c.conversation in TUNE) == keep]
                halves[name] = _recall(corpora, chosen, cap)
            everything = _recall(corpora, cases, cap)
            print(f"locomo budget {budget} ({chunks} chunks) place cap {cap}: tune {halves['tune']}"
                  f" held-out {halves['held-out']} all {everything}", flush=True)  # fmt: skip
            record(f"locomo {spec} cap {cap}", {"chunks": chunks, **halves, "all": everything})


def _recall(corpora, cases, cap: int | None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from explore_locomo import fused_rows

    totals: dict[str, float] = {}
    for case in cases:
        corpus = corpora[case.conversation]
        spans = [Span(row, *corpus.spans[row]) for row in fused_rows(case, 40, 0.7)]
        places = capped_places(spans, 40, cap) if cap else merge_places(spans, 40)
        hits = [{"path": p.path, "start_line": p.start_line, "end_line": p.end_line} for p in places]
        for key, value in recall_of(hits, case.wanted, corpus.turns).items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: round(value / len(cases), 3) for key, value in totals.items()}


def capped_places(ranked: list[Span], limit: int, max_lines: int) -> list[Place]:
    """places.merge_places, except that a chunk which would grow a place beyond `max_lines` lines is left out."""
    places: list[Place] = []
    for span in ranked:
        joined = [place for place in places if place.touches(span)]
        if joined:
            start = min(span.start_line, *(p.start_line for p in joined))
            if max(span.end_line, *(p.end_line for p in joined)) - start + 1 > max_lines:
                continue
            first, *others = joined
            first.absorb(span.start_line, span.end_line, [span.chunk_id])
            for other in others:
                first.absorb(other.start_line, other.end_line, other.chunk_ids)
                places.remove(other)
        elif len(places) == limit:
            break
        else:
            places.append(Place(span.path, span.start_line, span.end_line, [span.chunk_id]))
    return places


def scifact(specs: list[str], embedder: CachedEmbedder) -> None:
    from bench_ingest import write_subset

    _corpus, queries, qrels = load()
    subset_folder = CACHE / "explore" / "scifact-subset-md"
    if not subset_folder.exists():
        write_subset(subset_folder)
    subset_docs = {p.stem for p in (subset_folder / "memory").glob("*.md")}
    for budget in specs:
        results: dict[str, float] = {}
        tag, size, fill = variant(budget)
        for name, folder in (("full", CACHE / "scifact-md"), ("subset", subset_folder)):
            data = CACHE / "explore" / f"scifact-{name}-{tag}"
            index = MemoryIndex.open(data, "scifact", embedder, create=True, settings=settings_for(size, fill))
            index.index(folder)
            index.close()
            pickled = CACHE / "explore" / f"scifact-{name}-{tag}.pickle"
            lists = prepare_scifact(queries, data / "indexes" / "scifact", pickled, embedder)
            ranked = {qid: product(lists, qid) for qid in queries}
            for half, keep in (("tune", 0), ("held-out", 1)):
                chosen = {q: r for q, r in qrels.items() if int(q) % 2 == keep}
                results[f"{name} {half}"] = round(evaluate(ranked, chosen)[0], 4)
            results[f"{name} all"] = round(evaluate(ranked, qrels)[0], 4)
            results[f"{name} chunks"] = len(lists.docs)
        assert subset_docs
        print(f"scifact budget {budget}: {json.dumps(results)} ({embedder.embedded} embedded so far)", flush=True)
        record(f"scifact {budget}", results)


def record(key: str, figures: dict) -> None:
    """Keep a variant's figures in bench/results/chunking.json, beside those of earlier runs."""
    path = RESULTS / "chunking.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    kept[key] = figures
    path.write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n", "utf-8")


def main() -> None:
    which, *rest = sys.argv[1:]
    embedder = CachedEmbedder()
    (locomo if which == "locomo" else scifact)(rest or ["64", "96", "128", "192", "254"], embedder)


if __name__ == "__main__":
    sys.exit(main())
