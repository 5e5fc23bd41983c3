"""Bringing the search index in PostgreSQL up to date with the file store's files in the same schema.

The files are read from the database (`files.content`), not from a disk: a file is to be indexed when its hash
differs from the hash it was indexed at (`indexed_files.hash`), and to be forgotten when it is no longer live.
Whichever replica runs this takes the index's indexing lock first (`PgSearchIndex`), so a change is chunked and
embedded once, and a second replica finds nothing left to do. Chunking, labels and the embedding cache are the
SQLite engine's (`server.index.indexer.prepare`); each file is written in its own transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from server.errors import EmbeddingError
from server.index.chunker import ChunkerConfig
from server.index.embeddings.base import Embedder, Tokenizer
from server.index.indexer import EMBED_BATCH_CHUNKS, IndexReport, Prepared, prepare
from server.index.scan import ScanConfig, UnreadableFile, day_of, decode_memory
from server.index.vectors import VectorSpace
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection
from server.postgres.search_vectors import embed_missing, put_meta, read_space

log = logging.getLogger(__name__)


class PgIndexer:
    """One indexing run's collaborators: the connection, the live vectors and their provider (None: keyword only),
    and the chunking."""

    def __init__(
        self,
        db: PgConnection,
        embedder: Embedder | None,
        space: VectorSpace | None,
        tokenizer: Tokenizer,
        chunker: ChunkerConfig,
        scan: ScanConfig,
    ) -> None:
        self.db, self.embedder, self.space = db, embedder, space
        self.tokenizer, self.chunker, self.scan = tokenizer, chunker, scan

    def run(
        self,
        *,
        force: bool = False,
        paths: Collection[str] | None = None,
        on_file: Callable[[str], None] | None = None,
        on_seen: Callable[[str], None] | None = None,
    ) -> IndexReport:
        """Index the live files whose content is not indexed yet (every one with `force`), forget the files that
        are gone; with `paths`, only those."""
        started = time.perf_counter()
        report = IndexReport()
        wanted = None if paths is None else set(paths)
        asked = None if wanted is None else sorted(wanted)  # a sync's few paths: not every row of a large index
        live = {
            str(path): str(digest)
            for path, digest in self.db.execute(*sq.live_files(asked))
            if self.scan.source_of(str(path)) is not None
        }
        known = {str(path): (int(i), str(digest)) for i, path, digest in self.db.execute(*sq.indexed(asked))}
        todo: list[str] = []
        for path in sorted(live):
            report.files_seen += 1
            if on_seen:
                on_seen(path)
            if not force and path in known and known[path][1] == live[path]:
                report.files_unchanged += 1
            else:
                todo.append(path)
        batch: list[Prepared] = []
        for start in range(0, len(todo), 64):
            for path, _digest, content in self.db.execute(*sq.contents(todo[start : start + 64])).fetchall():
                prepared = self._prepare(str(path), bytes(content), report)
                if prepared is not None:
                    batch.append(prepared)
                if sum(len(p.chunks) for p in batch) >= EMBED_BATCH_CHUNKS:
                    self._write_batch(batch, report, on_file)
                    batch = []
        self._write_batch(batch, report, on_file)
        for path in sorted(set(known) - set(live) if wanted is None else (set(known) & wanted) - set(live)):
            self.remove(known[path][0])
            report.files_removed += 1
        report.seconds = time.perf_counter() - started
        return report

    def _prepare(self, path: str, data: bytes, report: IndexReport) -> Prepared | None:
        source = self.scan.source_of(path)
        try:
            text = decode_memory(data, self.scan.max_file_bytes)
        except UnreadableFile as exc:
            log.warning("skipping %s: %s", path, exc)
            report.skipped.append((path, str(exc)))
            return None
        assert source is not None, "only files the rules take are read"
        return prepare(path, source, data, text, 0, self.tokenizer, self.chunker)

    def _write_batch(self, batch: list[Prepared], report: IndexReport, on_file: Callable[[str], None] | None) -> None:
        if not batch:
            return
        vectors: dict[str, bytes] = {}
        if self.embedder is not None and self.space is not None:
            items = {c.hash: c.embed_text for p in batch for c in p.chunks}
            try:
                vectors, embedded = embed_missing(self.db, self.embedder, items)
                report.chunks_embedded += embedded
            except EmbeddingError as exc:
                log.warning("embedding failed, chunks stay keyword-only until retried: %s", exc)
        for prepared in batch:
            self._write_file(prepared, vectors)
            report.files_indexed += 1
            report.chunks_written += len(prepared.chunks)
            if self.space is not None:
                report.chunks_pending += sum(1 for c in prepared.chunks if c.hash not in vectors)
            if on_file:
                on_file(prepared.relpath)

    def _write_file(self, p: Prepared, vectors: dict[str, bytes]) -> None:
        day = day_of(p.relpath)
        db = self.db
        with db:
            rows = db.execute("SELECT id FROM indexed_files WHERE path = ?", (p.relpath,)).fetchall()
            if rows:
                self._delete_chunks(int(rows[0][0]))
            file_id = int(
                db.execute(*sq.upsert_file(p.relpath, p.source, p.digest, p.size, p.lines, day, time.time()))
                .fetchall()[0][0]
            )  # fmt: skip
            # The live table now, not at the start of the run: a swap meanwhile must not strand these vectors.
            space = read_space(db) if self.space is not None else None
            for ordinal, (chunk, labels) in enumerate(zip(p.chunks, p.labels, strict=True)):
                values = (
                    file_id, ordinal, chunk.start_line, chunk.end_line, chunk.heading_text, chunk.context,
                    chunk.text, chunk.hash, chunk.tokens, " ".join(labels.tags), labels.category or "",
                )  # fmt: skip
                chunk_id = int(db.execute(*sq.insert_chunk(values, list(labels.tags))).fetchall()[0][0])
                vector = vectors.get(chunk.hash)
                if vector is not None and space is not None and space.serves(self.embedder):
                    db.execute(*sq.insert_vector(space.table, chunk_id, vector, p.source, p.relpath, day or ""))
            db.execute(*sq.adjust_stats(file_id, 1))
            put_meta(db, "last_change", str(time.time()))

    def remove(self, file_id: int) -> None:
        """Forget one indexed file."""
        with self.db:
            self._delete_chunks(file_id)
            self.db.execute(*sq.delete_file(file_id))
            put_meta(self.db, "last_change", str(time.time()))

    def _delete_chunks(self, file_id: int) -> None:
        self.db.execute(*sq.adjust_stats(file_id, -1))
        for key in ("vector_table", "vector_next_table"):
            rows = self.db.execute(*sq.get_meta(key)).fetchall()
            if rows:
                self.db.execute(*sq.delete_vectors_of_file(str(rows[0][0]), file_id))
        self.db.execute(*sq.delete_chunks_of_file(file_id))
