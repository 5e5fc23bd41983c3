"""The keyword side of a PostgreSQL index at 100k and 1M chunks, three ways in one run:

- before: the postings as schema version 6 kept them (no chunk lengths; the chunk's row read for each posting) and
  the statement that read them, every query word (`OLD_KEYWORD`, frozen here);
- every word: schema version 7's postings (the primary key's index holds each posting's count and chunk length) and
  the product's statement, every query word;
- now: the product: version 7 and the words `server.index.common_terms` keeps (those in over 10% of the chunks left
  out from 50,000 chunks, the rest taken rarest first up to 20,000 matches), as the SQLite engine does.

The index is the product's schema (opened and migrated by `PgSearchIndex`, no model: keyword search only), grown
by COPY to N chunks of real SciFact text: every abstract cut at sentence ends into chunks of about 900 characters
(the seed, 13k chunks), then copies of seed chunks with their sentences shuffled and one sentence of another seed
chunk added, so the vocabulary and its document frequencies stay those of real abstracts (as bench/scale_data.py
builds the SQLite set, without needing its vectors). Keyword rows come from the product's own `chunk_terms`.

Queries: SciFact's 300 test claims through `PgSearchIndex.search(mode="keyword", limit=10)` for the last two ways
(interleaved, after a warm-up pass), the 'before' statement alone after the postings are put back as version 6
kept them (on the first `--before-queries` claims). Also reported: how many words a query keeps, and how many of
the 10 best chunks stay the same. Starts a throwaway PostgreSQL (pgserver) unless MEMORY_DATABASE_URL names one (a
scratch database!). Usage: `python bench/bench_pg_keyword_scale.py [sizes...] [--before-queries N]`.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import time
from collections.abc import Iterator

import psycopg
from common import SCIFACT, median, percentile, postgres_url, report, save_json, table

from server.index import common_terms
from server.index.engine_settings import EngineSettings
from server.index.fts import query_terms
from server.index.queries import Filters
from server.index.search import build_options
from server.mirror.queries import Query
from server.postgres import search_queries as sq
from server.postgres.connection import schema_of
from server.postgres.search import PgSearchIndex

SIZES = [100_000, 1_000_000]
CHUNK_CHARS = 900
CHUNKS_PER_FILE = 10
BATCH = 20_000
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def seed_chunks() -> list[list[str]]:
    """Every SciFact abstract cut at sentence ends into chunks of about CHUNK_CHARS: each chunk's sentences."""
    chunks: list[list[str]] = []
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            current: list[str] = [doc["title"]]
            for sentence in _SENTENCE.split(doc["text"]):
                if current and sum(map(len, current)) + len(sentence) > CHUNK_CHARS:
                    chunks.append(current)
                    current = []
                current.append(sentence)
            if current:
                chunks.append(current)
    return chunks


def texts(size: int) -> Iterator[str]:
    """`size` chunk texts: the seed's, then shuffled copies with a sentence of another seed chunk (seeded)."""
    seed = seed_chunks()
    rng = random.Random(16)
    for number in range(size):
        if number < len(seed):
            yield " ".join(seed[number])
            continue
        sentences = list(rng.choice(seed))
        rng.shuffle(sentences)
        sentences.insert(rng.randrange(len(sentences) + 1), rng.choice(rng.choice(seed)))
        yield " ".join(sentences)


def _copy_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def grow(url: str, schema: str, size: int) -> float:
    """The index's tables filled by COPY with `size` chunks and their keyword rows; the seconds it took."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'SET search_path TO "{schema}"')
        db.execute(
            "INSERT INTO indexed_files(path, source, hash, size, lines, day, indexed_at)"
            " SELECT 'bulk/' || lpad(g::text, 7, '0') || '.md', 'memory', md5(g::text), 10, 10, NULL, 0"
            " FROM generate_series(1, %s) g",
            ((size + CHUNKS_PER_FILE - 1) // CHUNKS_PER_FILE,),
        )
        first_file = db.execute("SELECT min(id) FROM indexed_files WHERE path LIKE 'bulk/%%'").fetchall()[0][0]
        # The table's keys and indexes, dropped for the load and made again after it from their own definitions.
        keys = db.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'chunk_terms'::regclass AND contype = 'p'"
        ).fetchall()
        indexes = db.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename = 'chunk_terms' AND indexname NOT IN (SELECT conname FROM pg_constraint)"
        ).fetchall()
        for name, _ in keys:
            db.execute(f'ALTER TABLE chunk_terms DROP CONSTRAINT "{name}"')
        for name, _ in indexes:
            db.execute(f'DROP INDEX "{name}"')
        next_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM chunks").fetchall()[0][0]
        chunk_rows, term_rows = io.StringIO(), io.StringIO()

        def flush() -> None:
            with db.cursor().copy(
                "COPY chunks(id, file_id, ordinal, start_line, end_line, heading, context, text, hash, tokens, terms)"
                " FROM STDIN"
            ) as copy:
                copy.write(chunk_rows.getvalue())
            with db.cursor().copy("COPY chunk_terms(lexeme, chunk_id, tf, chunk_length) FROM STDIN") as copy:
                copy.write(term_rows.getvalue())
            for buffer in (chunk_rows, term_rows):
                buffer.seek(0)
                buffer.truncate()

        for number, text in enumerate(texts(size)):
            chunk_id = next_id + number
            lexemes, counts, length = sq.chunk_terms("", text)
            file_id, ordinal = first_file + number // CHUNKS_PER_FILE, number % CHUNKS_PER_FILE
            chunk_rows.write(
                f"{chunk_id}\t{file_id}\t{ordinal}\t{ordinal + 1}\t{ordinal + 1}\t\t\t{_copy_field(text)}"
                f"\tbulk{number}\t{length}\t{length}\n"
            )
            term_rows.writelines(
                f"{_copy_field(lexeme)}\t{chunk_id}\t{count}\t{length}\n"
                for lexeme, count in zip(lexemes, counts, strict=True)
            )
            if number % BATCH == BATCH - 1:
                flush()
        flush()
        db.execute(f"SELECT setval(pg_get_serial_sequence('chunks', 'id'), {next_id + size})")
        for name, definition in keys:
            db.execute(f'ALTER TABLE chunk_terms ADD CONSTRAINT "{name}" {definition}')
        for _, definition in indexes:
            db.execute(definition)
        db.execute(sq.recount_stats()[0])
        db.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def queries() -> list[str]:
    wanted = {line.split("\t")[0] for line in (SCIFACT / "qrels" / "test.tsv").read_text("utf-8").splitlines()[1:]}
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as lines:
        return [q["text"] for q in map(json.loads, lines) if q["_id"] in wanted]


# Schema version 6's postings (before `M007_POSTINGS_WITH_LENGTHS`), made from version 7's.
VERSION_6_POSTINGS = """
CREATE TABLE old_terms AS SELECT lexeme, chunk_id, tf FROM chunk_terms;
DROP TABLE chunk_terms;
ALTER TABLE old_terms RENAME TO chunk_terms;
ALTER TABLE chunk_terms ADD PRIMARY KEY (lexeme, chunk_id);
CREATE INDEX chunk_terms_by_chunk ON chunk_terms(chunk_id);
"""
# The keyword statement version 6 ran (search_queries.keyword_sql before this bench), without filters.
OLD_KEYWORD = """
WITH q AS (SELECT term, lexeme, count(*) OVER (PARTITION BY term) AS parts
    FROM unnest(?::int[], ?::text[]) AS q(term, lexeme)),
p AS (SELECT t.chunk_id, t.lexeme, t.tf, count(*) OVER (PARTITION BY t.lexeme) AS df
    FROM chunk_terms t WHERE t.lexeme = ANY(?::text[])),
s AS (SELECT greatest(chunks, 1)::float8 AS n, greatest(terms, 1)::float8 / greatest(chunks, 1) AS avgdl
    FROM keyword_stats),
m AS (SELECT p.chunk_id, sum(greatest(ln(greatest((s.n - p.df + 0.5) / (p.df + 0.5), 1e-9)), 1e-6)
            * p.tf * 2.2 / (p.tf + 1.2 * (1 - 0.75 + 0.75 * c.terms / s.avgdl))) AS score
    FROM p JOIN q ON q.lexeme = p.lexeme JOIN chunks c ON c.id = p.chunk_id CROSS JOIN s
    GROUP BY p.chunk_id, q.term, q.parts HAVING count(*) = q.parts),
scored AS MATERIALIZED (SELECT chunk_id AS id, -sum(score) AS rank FROM m GROUP BY chunk_id)
(SELECT id, rank FROM scored ORDER BY rank, id LIMIT ?)
UNION
SELECT id, rank FROM scored WHERE id = ANY(?::bigint[])"""
PRODUCT_KEYWORD = sq.keyword_sql
FLOOR = common_terms.MIN_CHUNKS


def old_keyword_sql(terms: list[list[str]], filters: Filters, limit: int, also: list[int]) -> Query:
    assert filters == Filters(), "the bench searches without filters"
    numbers = [number for number, lexemes in enumerate(terms) for _ in lexemes]
    flat = [lexeme for lexemes in terms for lexeme in lexemes]
    return OLD_KEYWORD, (numbers, flat, list(dict.fromkeys(flat)), limit, also)


def way(name: str) -> None:
    """Search the way `name` says: the statement, and whether common words are left out (the layout is the data's)."""
    sq.keyword_sql = old_keyword_sql if name == "before" else PRODUCT_KEYWORD  # type: ignore[assignment]
    common_terms.MIN_CHUNKS = FLOOR if name == "now" else 1 << 62


Timed = tuple[dict[str, list[float]], dict[str, list[list[str]]]]  # per way: milliseconds, each search's hits


def timed_searches(index: PgSearchIndex, claims: list[str], ways: tuple[str, ...]) -> Timed:
    """Each claim searched each way in turn (after a warm-up pass): milliseconds, and the hits' citations."""
    options = build_options(limit=10, mode="keyword", min_score=0)
    for name in ways:
        way(name)
        for claim in claims:
            index.search(claim, options)
    times: dict[str, list[float]] = {name: [] for name in ways}
    best: dict[str, list[list[str]]] = {name: [] for name in ways}
    for claim in claims:
        for name in ways:
            way(name)
            started = time.perf_counter()
            hits = index.search(claim, options).hits
            times[name].append(1000 * (time.perf_counter() - started))
            best[name].append([hit.citation for hit in hits])
    way("now")
    return times, best


def measure(url: str, size: int, claims: list[str], before_queries: int) -> dict[str, float | int]:
    name = f"keywords{size}"
    index = PgSearchIndex(url, name, None, EngineSettings())
    try:
        row: dict[str, float | int] = {"chunks": size, "load_s": round(grow(url, index.schema, size), 1)}
        timings, best = timed_searches(index, claims, ("every word", "now"))
        with index._reader() as db:
            held = index._counted(db)
            kept = [len(common_terms.rare_terms(query_terms(claim), *held)) for claim in claims]
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f'SET search_path TO "{index.schema}"')
            db.execute(VERSION_6_POSTINGS)
            db.execute("VACUUM ANALYZE chunk_terms")
        old_times, old_best = timed_searches(index, claims[:before_queries], ("before",))
        timings |= old_times
        best |= old_best
        for name, values in timings.items():
            row[f"p50 {name}"] = round(median(values), 1)
            row[f"p95 {name}"] = round(percentile(values, 95), 1)
        row["words"] = round(sum(len(query_terms(c)) for c in claims) / len(claims), 2)
        row["words_kept"] = round(sum(kept) / len(claims), 2)
        pairs = zip(best["every word"], best["now"], strict=True)
        row["top10_same"] = round(sum(len(set(a) & set(b)) / max(len(a), 1) for a, b in pairs) / len(claims), 3)
        same = sum(a == b for a, b in zip(best["before"], best["every word"], strict=False))
        row["before_same_hits"] = same  # the old statement on the old postings ranks as the new does
        row["before_queries"] = len(timings["before"])
        return row
    finally:
        way("now")
        with index._writer as db:
            db.execute(f'DROP SCHEMA IF EXISTS "{schema_of(name)}" CASCADE')
        index.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=SIZES)
    parser.add_argument("--before-queries", type=int, default=300, help="claims searched the old way (slow at 1M)")
    args = parser.parse_args()
    claims = queries()
    rows = []
    with postgres_url() as url:
        for size in args.sizes:
            rows.append(measure(url, size, claims, args.before_queries))
            print(rows[-1], flush=True)
    ways = ("before", "every word", "now")
    headers = ["chunks", "load s", *(f"{q} ms {w}" for w in ways for q in ("p50", "p95")), "words", "words kept"]
    body = (
        f"{len(claims)} SciFact claims, keyword search through `PgSearchIndex.search` (limit 10). 'before': schema"
        " version 6's postings and statement, every word (on the first claims only: 'before' queries); 'every word':"
        " version 7's, every word; 'now': version 7's and the words `server.index.common_terms` keeps. 'top-10"
        " shared': the share of the 10 best chunks 'every word' and 'now' both find; 'same hits': claims whose hits"
        " 'before' and 'every word' give alike (the layout changes no ranking).\n\n"
        + table(
            [*headers, "top-10 shared", "same hits", "before queries"],
            [
                [f"{r['chunks']:,}", r["load_s"], *(r[f"{q} {w}"] for w in ways for q in ("p50", "p95")),
                 r["words"], r["words_kept"], r["top10_same"], r["before_same_hits"], r["before_queries"]]
                for r in rows
            ],
        )
    )  # fmt: skip
    report("pg_keyword_scale", "PostgreSQL's keyword side at 100k and 1M chunks", body)
    save_json("pg_keyword_scale", rows)


if __name__ == "__main__":
    main()
