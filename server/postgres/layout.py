"""The files of an index laid out in a local folder, for the search engine to read (`SearchIndex.index(root)`).

A copy, never the truth: the database holds the files. It is brought in step with the database when the store
opens (files written, changed or removed elsewhere, or on this disk behind the server's back), and after each
change made through the store. Paths are reached without following links (`server.mirror.files`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from server.mirror.files import Staged, folder, lstat_file, take_snapshot, walk


class FilesLayout:
    """The folder `root`, holding each live file's bytes at its path."""

    def __init__(self, root: Path, max_file_bytes: int) -> None:
        self.root, self.max_file_bytes = root, max_file_bytes
        root.mkdir(parents=True, exist_ok=True)

    def put(self, path: str, data: bytes) -> None:
        with folder(self.root, path, create=True) as parent:
            staged = Staged(parent, path.rsplit("/", 1)[-1], path, data)
            try:
                staged.publish()
            except BaseException:
                staged.discard()
                raise

    def remove(self, path: str) -> None:
        name = path.rsplit("/", 1)[-1]
        with contextlib.suppress(FileNotFoundError), folder(self.root, path) as parent:
            if lstat_file(parent, name, path) is not None:
                os.unlink(name, dir_fd=parent)

    def refresh(self, live: dict[str, str], content: Callable[[str], bytes | None]) -> int:
        """Make the folder hold exactly the `live` files (path -> hash), reading the bytes of those that differ
        through `content(path)`; how many files it wrote or removed."""
        done = 0
        for path, _info in list(walk(self.root)):
            if path not in live:
                self.remove(path)
                done += 1
        for path, digest in live.items():
            snapshot = take_snapshot(self.root, path, self.max_file_bytes, quiet=True)
            if snapshot is not None and snapshot.digest == digest:
                continue
            data = content(path)
            if data is not None:
                self.put(path, data)
                done += 1
        return done
