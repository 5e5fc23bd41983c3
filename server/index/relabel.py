"""After the upgrade that added labels (migration 4 marks every file changed), each file of an index is chunked
again once: in the background, RELABEL_BATCH_FILES files per turn of the index's write lock, so searches (on the
chunks as they were) and writes go on meanwhile. Chunk texts that did not change take their vectors from the
embedding cache, not the model. Stopped by closing the index, it goes on at the next open."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

from server.index.migrations import RELABEL_HASH, RELABEL_KEY
from server.index.store import Store

log = logging.getLogger(__name__)

RELABEL_BATCH_FILES = 50


class MemoryIndex(Protocol):
    """What the re-chunk needs of `server.index.engine.MemoryIndex` (which starts it)."""

    name: str
    store: Store
    closing: threading.Event

    @property
    def root(self) -> Path | None: ...
    def indexed_files(self) -> dict[str, str]: ...
    def index(
        self, root: Path | None = None, *, rebuild_now: bool = True, paths: Collection[str] | None = None
    ) -> object: ...


def relabel_notice(store: Store) -> str | None:
    """What status and search say while files wait to be chunked again after the upgrade: it is the server's own
    work, finishing by itself, not changes for memory_sync to index; None when nothing waits."""
    if store.get_meta(RELABEL_KEY) is None:
        return None
    waiting = store.connection().execute("SELECT count(*) FROM files WHERE hash = ?", (RELABEL_HASH,)).fetchall()[0][0]
    if not waiting:
        return None
    files = "1 file" if waiting == 1 else f"{waiting} files"
    return (
        f"re-reading {files} for their tags after an upgrade, which finishes by itself: until each is done its old "
        "chunks answer searches, without tags"
    )


def start_relabel(index: MemoryIndex) -> threading.Thread | None:
    """The thread that re-chunks `index` after the upgrade, started; None when there is nothing to do."""
    if index.store.get_meta(RELABEL_KEY) is None:
        return None
    thread = threading.Thread(target=_relabel, args=(index,), name=f"relabel-{index.name}", daemon=True)
    thread.start()
    return thread


def _relabel(index: MemoryIndex) -> None:
    try:
        root = index.root
        if root is None or not root.is_dir():  # marked still: the next open tries again
            log.warning("cannot chunk %s again for its tags: the folder of its files is missing", index.name)
            return
        stale = sorted(path for path, digest in index.indexed_files().items() if digest == RELABEL_HASH)
        log.info("chunking %d files of %s again for their tags", len(stale), index.name)
        for start in range(0, len(stale), RELABEL_BATCH_FILES):
            if index.closing.is_set():
                return
            index.index(root, paths=stale[start : start + RELABEL_BATCH_FILES], rebuild_now=False)
        if not index.closing.is_set():
            index.store.set_meta(RELABEL_KEY, None)
    except Exception:  # the index closed under it, or a file failed: the next open takes it up again
        log.warning("re-chunking %s for its tags stopped; it goes on at the next open", index.name, exc_info=True)
