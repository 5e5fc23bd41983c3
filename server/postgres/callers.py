"""Who may connect, shared by every replica: `callers.toml`'s text kept in PostgreSQL (`channel.callers`).

With `MEMORY_DATABASE_URL` set, the database holds the one version every replica answers from; the file in the
keys directory is read only once, to fill an empty table on the first start (`import_callers`). The
`memory-server callers` commands edit the row (`update_shared_callers`: read, change and write under a row lock,
bumping `version`), delete the sessions of every key no longer allowed and NOTIFY `CALLERS_CHANNEL`, all in one
transaction. Each replica's `SharedCallers` reloads on
that notice (a listening thread, `server.postgres.notify`) and, should a notice be lost, compares the version at
most every CHECK_EVERY seconds on the next lookup: a revoked key is refused everywhere within a second.

That check runs on the server's event loop, under the session store's outage guard
(`server.postgres.outage.Outage`): with the database out of reach a lookup does not connect (one connection
attempt per backoff is made on a thread of its own). Meanwhile the list last read keeps answering until
STALE_AFTER seconds past the last check the database answered (a revocation is a write to that database, so none
was missed before then); after that a lookup raises `StoreUnavailable` (a 503) until a check succeeds, so a key
revoked while this replica cannot see the database is not let in for longer than that.

The document is parsed with the file's own rules (`server.callers.config`); a version that does not parse is
never written, and one damaged by hand keeps the last good table, as with the file.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from channel.authz import Identity
from channel.errors import StoreUnavailable
from server.callers.config import CallerEntry, CallersConfig, CallersFileError, parse_callers, render_callers
from server.callers.file import read_callers
from server.mirror.state import utc_now
from server.postgres.channel_schema import CALLERS_CHANNEL, open_channel_db
from server.postgres.connection import PgConnection
from server.postgres.notify import ChangeListener
from server.postgres.outage import Outage

log = logging.getLogger("server.callers.config")

CHECK_EVERY = 0.5  # seconds between version checks on lookup, should a notice be lost
STALE_AFTER = 1.0  # seconds past the last check the database answered that the list is still used (then: 503s)
RELOAD_WAIT = 0.5  # seconds a check waits for a reload the listener's thread has under way (it answers the same)


def import_callers(db: PgConnection, path: Path) -> bool:
    """Fill the empty table from `callers.toml` at `path` (none or a missing file: no callers); True if it did."""
    with db:
        db.execute("LOCK TABLE callers IN EXCLUSIVE MODE")
        if db.execute("SELECT 1 FROM callers").fetchone() is not None:
            return False
        config, _ = read_callers(path)  # only now: once imported, the file is not read (nor refused) again
        db.execute(
            "INSERT INTO callers(id, version, document, updated_at) VALUES(1, 1, ?, ?)",
            (render_callers(config), utc_now()),
        )
        db.execute("SELECT pg_notify(?, '')", (CALLERS_CHANNEL,))
    log.info("imported %d callers from %s into the database", len(config.callers), path)
    return True


def read_shared_callers(db: PgConnection) -> tuple[CallersConfig, int]:
    """The callers in the database and their version (no callers and 0 before the first import)."""
    row = db.execute("SELECT document, version FROM callers").fetchone()
    if row is None:
        return CallersConfig(), 0
    return parse_callers(str(row[0])), int(row[1])


def read_or_import(url: str, path: Path) -> CallersConfig:
    """The shared callers (filled from `path` first if the table is still empty)."""
    db = open_channel_db(url)
    try:
        import_callers(db, path)
        return read_shared_callers(db)[0]
    finally:
        db.close()


def active_keys(config: CallersConfig) -> set[bytes]:
    """The X25519 forms of every key that may connect (what sessions record)."""
    return {key.x25519 for entry in config.callers for key in entry.keys}


def imported(path: Path, *, allow_no_keys: bool = False) -> Callable[[CallersConfig], CallersConfig]:
    """A change that replaces the shared callers with `callers.toml` at `path`, keeping every key revoked in the
    database revoked: refused when the file would let one in, and kept in `revoked_keys` when the file omits it.

    A missing file is an error, not an empty list (a wrong `--keys-dir` must not lock every device out), and so is
    a file with no active key while the database has some, unless `allow_no_keys`."""
    config, signature = read_callers(path)
    if signature is None:
        raise CallersFileError(f"no callers file at {path}: nothing was imported; check --keys-dir")

    def change(before: CallersConfig) -> CallersConfig:
        if not allow_no_keys and active_keys(before) and not active_keys(config):
            raise CallersFileError(
                f"{path} lets no key connect, so importing it would lock out every device the database lets in: "
                "nothing was imported; pass --allow-no-keys to do so on purpose"
            )
        revoked = {key.x25519: key for entry in before.callers for key in entry.revoked_keys}
        for key in active_keys(config) & revoked.keys():
            raise CallersFileError(f"{path} lists key {revoked[key].fingerprint} as active, but it was revoked")
        listed = {key.x25519 for entry in config.callers for key in entry.revoked_keys}
        entries = {entry.name: entry for entry in config.callers}
        for old in before.callers:  # revokes the file does not know are kept, under their caller
            kept = tuple(key for key in old.revoked_keys if key.x25519 not in listed)
            if kept:
                entry = entries.get(old.name, CallerEntry(old.name))
                entries[old.name] = replace(entry, revoked_keys=entry.revoked_keys + kept)
        return CallersConfig(tuple(entries.values()))

    return change


def update_shared_callers(
    url: str, path: Path, change: Callable[[CallersConfig], CallersConfig]
) -> tuple[CallersConfig, CallersConfig]:
    """Read, change and write back the shared callers, waking every replica; (before, after). The table is filled
    from `path` first if still empty. When `change` raises, nothing is written."""
    db = open_channel_db(url)
    try:
        import_callers(db, path)
        with db:
            row = db.execute("SELECT document FROM callers FOR UPDATE").fetchone()
            before = parse_callers(str(row[0])) if row else CallersConfig()
            after = change(before)
            db.execute(
                "UPDATE callers SET document = ?, version = version + 1, updated_at = ?",
                (render_callers(after), utc_now()),
            )
            for key in active_keys(before) - active_keys(after):  # their sessions end with the change
                db.execute("DELETE FROM sessions WHERE static_key = ?", (key,))
            db.execute("SELECT pg_notify(?, '')", (CALLERS_CHANNEL,))
        return before, after
    finally:
        db.close()


class SharedCallers:
    """A `CallerDirectory` over the shared callers (see the module docstring). `close` stops its listener."""

    def __init__(
        self,
        url: str,
        path: Path,
        *,
        check_every: float = CHECK_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._check_every, self._clock = check_every, clock
        self._lock = threading.Lock()
        self._db = open_channel_db(url)
        self._outage = Outage(clock)
        self._confirmed = 0.0  # when the database last answered a check or a reload
        self._version = -1
        self._config = CallersConfig()
        self._table = self._config.table()
        self.error: str | None = None
        try:
            if not import_callers(self._db, path) and path.exists():
                log.info(
                    "the callers are in the database; %s is not read: edit them with `memory-server callers`", path
                )
        except BaseException:
            self._db.close()
            raise
        self._next_check = 0.0
        self.reload()
        self._listener = ChangeListener(url, CALLERS_CHANNEL, self._noticed, own_pid=lambda: None)

    @property
    def listening(self) -> threading.Event:
        """Set while the notices are heard (between a lost connection and the next one, only the poll works)."""
        return self._listener.listening

    @property
    def config(self) -> CallersConfig:
        return self._config

    def close(self) -> None:
        self._listener.close()
        self._outage.close()
        self._db.close()

    def lookup(self, static_key: bytes) -> Identity | None:
        if self._clock() >= self._next_check:
            self._check()
        if self._clock() - self._confirmed > STALE_AFTER:
            raise StoreUnavailable()
        return self._table.lookup(static_key)

    def _check(self) -> None:
        """Compare the version with the database's, reading the list again when it changed. On the event loop: under
        the outage guard. A reload the listener's thread has under way is waited for, up to RELOAD_WAIT: it brings
        the news and confirms the list, so a lookup after an idle spell is not refused as stale while it runs."""
        if not self._lock.acquire(timeout=RELOAD_WAIT):
            return
        try:
            now = self._clock()
            if now < self._next_check:
                return
            self._next_check = now + self._check_every
            with contextlib.suppress(StoreUnavailable), self._outage.guard(self._db):
                row = self._db.execute("SELECT version FROM callers").fetchone()
                if (int(row[0]) if row else 0) != self._version:
                    self._read()
                self._confirmed = now
        finally:
            self._lock.release()

    def _noticed(self) -> None:
        self.reload()

    def reload(self) -> bool:
        """Read the shared callers now; True when they are in use, False when the last good table stays."""
        with self._lock:
            return self._read()

    def _read(self) -> bool:
        now = self._clock()
        self._next_check = now + self._check_every
        try:
            config, version = read_shared_callers(self._db)
        except CallersFileError as exc:
            self._confirmed = now  # the database answered: what it holds is damaged, the last good list stays
            if self.error != str(exc):
                log.error("the callers in the database are invalid (%s); still using the last good ones", exc)
            self.error = str(exc)
            return False
        if version != self._version:
            keys = sum(len(entry.keys) for entry in config.callers)
            log.info(
                "callers version %d from the database: %d callers, %d active keys",
                version,
                len(config.callers),
                keys,
            )
        self._config, self._table, self._version, self.error = config, config.table(), version, None
        self._confirmed = now
        return True
