"""Write transactions on the index database.

Several connections write one index: the indexing run, the background rebuild of the vectors, the cache pruning.
`with db:` opens a deferred transaction, which reads first and asks for the write lock only at its first write; when
another connection has committed in between, SQLite answers "database is locked" at once (its snapshot is stale, so
the busy handler cannot help) and the whole operation fails. `writing` takes the write lock first (BEGIN
IMMEDIATE), waiting up to the busy timeout for another writer, so a read-then-write is never refused that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import apsw


@contextmanager
def writing(db: apsw.Connection) -> Iterator[apsw.Connection]:
    """A transaction holding the write lock from its start; a savepoint inside one already open."""
    if db.in_transaction:
        with db:
            yield db
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
