"""The mirror's change notices: a listener hears of every recorded change, at most once per `holding` block.

Writers wrap a write and its indexing in `holding`, so a woken long-poll never sees a file that is not yet
searchable, and a push of a hundred files wakes its readers once. A listener that fails never undoes or fails the
change it was told of.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


class ChangeNotices:
    """Tells `listener` (in whatever thread made the change) of changes; thread-safe."""

    def __init__(self, listener: Callable[[], None] | None) -> None:
        self.listener = listener
        self._held = threading.local()  # per thread: depth of `holding` blocks, a notice waiting

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold this thread's change notices until the block ends, then send one."""
        depth = getattr(self._held, "depth", 0)
        self._held.depth = depth + 1
        try:
            yield
        finally:
            self._held.depth = depth
            if depth == 0 and getattr(self._held, "waiting", False):
                self._held.waiting = False
                self.changed()

    def changed(self) -> None:
        """One change was recorded: tell the listener now, or when this thread's `holding` block ends."""
        if self.listener is None:
            return
        if getattr(self._held, "depth", 0):
            self._held.waiting = True
            return
        try:
            self.listener()
        except Exception:  # a listener's failure must never undo or fail a recorded change
            log.exception("mirror change listener failed")
