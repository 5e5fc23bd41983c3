"""Bring an index up to date with a folder of memory files: skip unchanged files, re-embed only new chunks,
remove deleted files. Each file is written in its own transaction, so a crash leaves a consistent index."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from server.index.chunker import Chunk, ChunkerConfig, chunk_markdown
from server.index.embeddings.base import Embedder, Tokenizer
from server.index.errors import EmbeddingError, InvalidArgumentError
from server.index.labels import Labels
from server.index.scan import ScanConfig, UnreadableFile, day_of, decode_memory
from server.index.store import Store
from server.index.tagging import labelled_text
from server.index.transaction import writing
from server.index.vectors import VectorSpace, embed_missing
from server.mirror.paths import normalise_mirror_path
from syncproto.faults import fault_point

log = logging.getLogger(__name__)

PATHS_PER_QUERY = 500  # paths looked up in one statement (under SQLite's bound-parameter limit)
EMBED_BATCH_CHUNKS = 512  # chunks gathered across files before one call to the model (which sorts by length)


@dataclass
class IndexReport:
    files_seen: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    chunks_written: int = 0
    chunks_embedded: int = 0  # model calls, per chunk; the rest came from the cache
    chunks_pending: int = 0  # written without a vector because the model failed
    seconds: float = 0.0


@dataclass(frozen=True)
class Prepared:
    """A file cut into chunks with their labels, ready to write (by any backend)."""

    relpath: str
    source: str
    digest: str
    size: int
    mtime_ns: int
    lines: int
    chunks: list[Chunk]
    labels: list[Labels]  # of each chunk


def prepare(
    relpath: str, source: str, data: bytes, text: str, mtime_ns: int, tokenizer: Tokenizer, chunker: ChunkerConfig
) -> Prepared:
    """The chunks and labels of the file `relpath` whose bytes are `data` and decoded text `text`. Pure."""
    labelled = labelled_text(text)
    chunks = chunk_markdown(labelled.text, tokenizer, chunker)
    # A chunk's last line: a chunk led by empty headings ends in the section its text belongs to.
    labels = [labelled.at(chunk.end_line) for chunk in chunks]
    lines = text.count("\n") + 1 if text else 0
    digest = hashlib.sha256(data).hexdigest()
    return Prepared(relpath, source, digest, len(data), mtime_ns, lines, chunks, labels)


def count_memory_files(root: Path, config: ScanConfig | None = None) -> int:
    """How many files a run over `root` looks at (0 when it is not a folder): the total for progress reports."""
    return sum(1 for _ in scan_folder(root, config or ScanConfig())) if root.is_dir() else 0


def source_of(relpath: str, config: ScanConfig) -> str | None:
    """The source of a file the rules take and the mirror would hold under that very name, else None: the index
    and the mirror hold the same files (a hidden, non-NFC or `a:b.md` name is never indexed, as it is never held)."""
    source = config.source_of(relpath)
    if source is None:
        return None
    try:
        return source if normalise_mirror_path(relpath) == relpath else None
    except InvalidArgumentError:
        return None


def scan_folder(root: Path, config: ScanConfig) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, source, lstat) of every regular file the rules take; symlinks are never followed."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        base = Path(dirpath)
        for name in sorted(filenames):
            path = base / name
            relpath = path.relative_to(root).as_posix()
            source = source_of(relpath, config)
            if source is None:
                continue
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                yield relpath, source, info


def scan_paths(root: Path, config: ScanConfig, relpaths: Collection[str]) -> Iterator[tuple[str, str, os.stat_result]]:
    """`scan_folder` for given relative paths only: the same rules, and no symlink anywhere on the way."""
    for relpath in sorted(set(relpaths)):
        source = source_of(relpath, config)
        if source is None or relpath.startswith("/") or ".." in relpath.split("/"):
            continue
        path = root
        info: os.stat_result | None = None
        for part in relpath.split("/"):
            path = path / part
            try:
                info = path.lstat()
            except OSError:
                info = None
                break
            if stat.S_ISLNK(info.st_mode):
                info = None
                break
        if info is not None and stat.S_ISREG(info.st_mode):
            yield relpath, source, info


class Indexer:
    def __init__(
        self,
        store: Store,
        embedder: Embedder | None,
        space: VectorSpace | None,
        tokenizer: Tokenizer,
        chunker: ChunkerConfig,
        scan: ScanConfig,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.space = space  # the live vector table, when it belongs to `embedder`
        self.tokenizer = tokenizer
        self.chunker = chunker
        self.scan = scan

    def run(
        self,
        root: Path,
        *,
        force: bool = False,
        on_file: Callable[[str], None] | None = None,
        only: Collection[str] | None = None,
        on_seen: Callable[[str], None] | None = None,
    ) -> IndexReport:
        """Bring the index up to date with `root`; with `only`, look at just those relative paths (a file that is
        gone, or no longer a memory file, leaves the index) instead of walking the whole folder, and read each of
        them: a caller names files it knows changed, and an edit can keep the size and mtime (`cp -p`, or within
        one timestamp tick), so only the content hash tells (an unchanged one is not written again)."""
        if not root.is_dir():
            raise InvalidArgumentError(f"not a folder: {root}")
        started = time.perf_counter()
        report = IndexReport()
        db = self.store.connection()
        known = {
            path: (file_id, digest, size, mtime_ns) for file_id, path, digest, size, mtime_ns in self._known(db, only)
        }
        seen: set[str] = set()
        batch: list[Prepared] = []
        files = scan_folder(root, self.scan) if only is None else scan_paths(root, self.scan, only)
        for relpath, source, info in files:
            report.files_seen += 1
            seen.add(relpath)
            if on_seen:
                on_seen(relpath)
            old = known.get(relpath)
            if old and not force and only is None and (old[2], old[3]) == (info.st_size, info.st_mtime_ns):
                report.files_unchanged += 1
                continue
            prepared = self._prepare(root, relpath, source, info, report)
            if prepared is None:
                if old:  # its old text is no longer what the file says: not found by searches any more
                    self.remove(relpath)
                continue
            if old and not force and old[1] == prepared.digest:
                with writing(db):  # same bytes, new mtime: remember the stat so the next scan skips it fast
                    db.execute("UPDATE files SET mtime_ns = ? WHERE id = ?", (prepared.mtime_ns, old[0]))
                report.files_unchanged += 1
                continue
            batch.append(prepared)
            if sum(len(p.chunks) for p in batch) >= EMBED_BATCH_CHUNKS:
                self._write_batch(batch, report, on_file)
                batch = []
        self._write_batch(batch, report, on_file)
        for relpath in sorted((set(known) if only is None else set(known) & set(only)) - seen):
            self.remove(relpath)
            report.files_removed += 1
        report.seconds = time.perf_counter() - started
        return report

    @staticmethod
    def _known(db: apsw.Connection, only: Collection[str] | None) -> list[tuple[Any, ...]]:
        """The indexed files' rows: all of them, or only those of `only` (a sync's few paths need not read all
        100,000 rows of a million-chunk index: 59 ms)."""
        sql = "SELECT id, path, hash, size, mtime_ns FROM files"
        if only is None:
            return db.execute(sql).fetchall()
        paths, rows = sorted(set(only)), []
        for start in range(0, len(paths), PATHS_PER_QUERY):
            part = paths[start : start + PATHS_PER_QUERY]
            rows += db.execute(f"{sql} WHERE path IN ({', '.join('?' for _ in part)})", part).fetchall()
        return rows

    def _prepare(
        self, root: Path, relpath: str, source: str, info: os.stat_result, report: IndexReport
    ) -> Prepared | None:
        try:
            if info.st_size > self.scan.max_file_bytes:
                raise UnreadableFile(f"larger than {self.scan.max_file_bytes} bytes")
            data = (root / relpath).read_bytes()
            text = decode_memory(data, self.scan.max_file_bytes)
        except (UnreadableFile, OSError) as exc:
            reason = str(exc) if isinstance(exc, UnreadableFile) else f"unreadable ({exc.strerror})"
            log.warning("skipping %s: %s", relpath, reason)
            report.skipped.append((relpath, reason))
            return None
        return prepare(relpath, source, data, text, info.st_mtime_ns, self.tokenizer, self.chunker)

    def _write_batch(self, batch: list[Prepared], report: IndexReport, on_file: Callable[[str], None] | None) -> None:
        if not batch:
            return
        db = self.store.connection()
        vectors: dict[str, bytes] = {}
        fault_point("index.chunked")
        if self.embedder is not None and self.space is not None:
            items = {c.hash: c.embed_text for p in batch for c in p.chunks}
            try:
                vectors, embedded = embed_missing(db, self.embedder, items)
                report.chunks_embedded += embedded
            except EmbeddingError as exc:
                log.warning("embedding failed, chunks stay keyword-only until retried: %s", exc)
        fault_point("index.embedded")
        for prepared in batch:
            self._write_file(db, prepared, vectors)
            fault_point("index.committed")
            report.files_indexed += 1
            report.chunks_written += len(prepared.chunks)
            if self.space is not None:
                report.chunks_pending += sum(1 for c in prepared.chunks if c.hash not in vectors)
            if on_file:
                on_file(prepared.relpath)

    def _write_file(self, db: apsw.Connection, p: Prepared, vectors: dict[str, bytes]) -> None:
        day = day_of(p.relpath)
        with writing(db):
            rows = db.execute("SELECT id FROM files WHERE path = ?", (p.relpath,)).fetchall()
            if rows:
                file_id = int(rows[0][0])  # type: ignore[arg-type]
                self._delete_chunks(db, file_id)
                db.execute(
                    "UPDATE files SET source = ?, hash = ?, size = ?, mtime_ns = ?, lines = ?, day = ?,"
                    " indexed_at = ? WHERE id = ?",
                    (p.source, p.digest, p.size, p.mtime_ns, p.lines, day, time.time(), file_id),
                )
            else:
                db.execute(
                    "INSERT INTO files(path, source, hash, size, mtime_ns, lines, day, indexed_at)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                    (p.relpath, p.source, p.digest, p.size, p.mtime_ns, p.lines, day, time.time()),
                )
                file_id = db.last_insert_rowid()
            for ordinal, (chunk, labels) in enumerate(zip(p.chunks, p.labels, strict=True)):
                db.execute(
                    "INSERT INTO chunks(file_id, ordinal, start_line, end_line, heading, context, text, hash, tokens,"
                    " tags, category) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        file_id,
                        ordinal,
                        chunk.start_line,
                        chunk.end_line,
                        chunk.heading_text,
                        chunk.context,
                        chunk.text,
                        chunk.hash,
                        chunk.tokens,
                        " ".join(labels.tags),
                        labels.category or "",
                    ),
                )
                chunk_id = db.last_insert_rowid()
                for tag in labels.tags:
                    db.execute("INSERT INTO chunk_tags(tag, chunk_id) VALUES(?, ?)", (tag, chunk_id))
                vector = vectors.get(chunk.hash)
                if vector is not None and self.space is not None:
                    db.execute(
                        f"INSERT INTO {self.space.table}(chunk_id, embedding, source, path, day) VALUES(?, ?, ?, ?, ?)",
                        (chunk_id, vector, p.source, p.relpath, day or ""),
                    )
            self.store.set_meta("last_change", str(time.time()), db)

    def remove(self, relpath: str) -> bool:
        """Forget one file; True when it was indexed."""
        db = self.store.connection()
        with writing(db):
            rows = db.execute("SELECT id FROM files WHERE path = ?", (relpath,)).fetchall()
            if not rows:
                return False
            file_id = int(rows[0][0])  # type: ignore[arg-type]
            self._delete_chunks(db, file_id)
            db.execute("DELETE FROM files WHERE id = ?", (file_id,))
            self.store.set_meta("last_change", str(time.time()), db)
        return True

    def _delete_chunks(self, db: apsw.Connection, file_id: int) -> None:
        # One vec0 row at a time: vec0 answers `chunk_id IN (...)` by scanning the whole table (278 ms at a million
        # chunks, on every edit of a file) and `chunk_id = ?` by a lookup (0.4 ms for a file's ten).
        ids = [int(row[0]) for row in db.execute("SELECT id FROM chunks WHERE file_id = ?", (file_id,))]
        for table in self._vector_tables():
            for chunk_id in ids:
                db.execute(f"DELETE FROM {table} WHERE chunk_id = ?", (chunk_id,))
        db.execute("DELETE FROM chunk_tags WHERE chunk_id IN (SELECT id FROM chunks WHERE file_id = ?)", (file_id,))
        db.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,))

    def _vector_tables(self) -> list[str]:
        return [t for key in ("vector_table", "vector_next_table") if (t := self.store.get_meta(key))]
