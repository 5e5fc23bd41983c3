"""The private work folders of a backup, a verify and a restore, named `<prefix><pid><suffix>` for the process
that made them: removed by it when it ends, and by the next one beside them when it was killed mid-way (a dead
process's folder holds copies of memory files, perhaps the server key, and makes a data folder look non-empty).
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


@contextmanager
def work_folder(parent: Path, prefix: str, suffix: str = "") -> Iterator[Path]:
    """This process's private folder in `parent`, made empty (mode 0700) and removed with everything in it after
    the block; the folders of the same kind left by processes that are gone are removed first."""
    remove_stale_work(parent, prefix, suffix)
    folder = parent / f"{prefix}{os.getpid()}{suffix}"
    shutil.rmtree(folder, ignore_errors=True)  # a dead process that had this pid before us
    folder.mkdir(mode=0o700)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_stale_work(parent: Path, prefix: str, suffix: str = "") -> None:
    """Remove the folders `<prefix><pid><suffix>` in `parent` whose process is gone (killed mid-way)."""
    for entry in parent.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}"):
        pid = entry.name.removeprefix(prefix).removesuffix(suffix)
        if not pid.isdigit() or entry.is_symlink() or not entry.is_dir() or _alive(int(pid)):
            continue
        log.info("backup: removing %s, left by a process that was stopped", entry.name)
        shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) is gone too
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
