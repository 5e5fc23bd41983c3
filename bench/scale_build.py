"""Engine indexes of 1k..1M chunks from the scale set (scale_data), written straight into the engine's schema.

Ten chunks a file; every chunk has its vector in the live vec0 table and in the embedding cache (real indexing
keeps both). Built once and cached under bench/.cache/scale/index-<size>.
"""

from __future__ import annotations

import time

import numpy as np
import scale_data
from common import CACHE, insert_file

from server.index.embeddings.base import Embedder
from server.index.engine import MemoryIndex
from server.index.vectors import live_space

CHUNKS_PER_FILE = 10
BATCH = 10_000


def build(
    size: int, embedder: Embedder, source: tuple[np.ndarray, list[str]] | None = None, name: str = "scale"
) -> tuple[MemoryIndex, float]:
    """The index of the first `size` chunks of the scale set (or of `source`'s vectors and texts), and the seconds
    its build took (0 when cached under bench/.cache/`name`)."""
    index = MemoryIndex.open(CACHE / name / f"index-{size}", "scale", embedder, create=True)
    db = index.store.connection()
    if db.execute("SELECT count(*) FROM chunks").fetchall()[0][0] == size:
        return index, 0.0
    if db.execute("SELECT count(*) FROM chunks").fetchall()[0][0]:
        raise SystemExit(f"a partial index is in {index.db_path}: remove it and run again")
    started = time.perf_counter()
    vectors, texts = source or (scale_data.vectors(), scale_data.texts(size))
    table = live_space(index.store).table  # type: ignore[union-attr]
    for start in range(0, size, BATCH):
        with db:
            for file_number in range(start // CHUNKS_PER_FILE, min(start + BATCH, size) // CHUNKS_PER_FILE):
                path = f"memory/{file_number:07}.md"
                file_id = insert_file(db, path, f"h{file_number}")
                for ordinal in range(CHUNKS_PER_FILE):
                    number = file_number * CHUNKS_PER_FILE + ordinal
                    chunk_hash = f"s{number}"
                    db.execute(
                        "INSERT INTO chunks(file_id, ordinal, start_line, end_line, heading, context, text, hash,"
                        " tokens) VALUES(?, ?, ?, ?, 'Abstract', '', ?, ?, 100)",
                        (file_id, ordinal, ordinal * 5 + 1, ordinal * 5 + 4, texts[number], chunk_hash),
                    )
                    chunk_id = db.last_insert_rowid()
                    blob = np.asarray(vectors[number], dtype=np.float32).tobytes()
                    db.execute(
                        f"INSERT INTO {table}(chunk_id, embedding, source, path, day) VALUES(?, ?, 'memory', ?, '')",
                        (chunk_id, blob, path),
                    )
                    db.execute(
                        "INSERT INTO embedding_cache(provider, model, hash, vector, used_at) VALUES(?, ?, ?, ?, ?)",
                        (embedder.provider, embedder.model, chunk_hash, blob, time.time()),
                    )
        print(f"  {min(start + BATCH, size):,} / {size:,} chunks", flush=True)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return index, time.perf_counter() - started
