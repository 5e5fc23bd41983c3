"""The tables replicas share for the channel, in schema `channel`: sessions, replay records, handshake timestamps
and who may connect. Numbered migrations, run once under the same advisory lock as an index's
(`server.postgres.migrations.migrate`).

No column holds a secret: session keys are sealed (`server.postgres.sealing`) under a key the database never sees.
Times are seconds since the epoch (the channel's clock), not `now()`: replicas compare them with their own clocks.
"""

from __future__ import annotations

from collections.abc import Mapping

from server.postgres.connection import PgConnection
from server.postgres.migrations import migrate

SCHEMA = "channel"
CALLERS_CHANNEL = "memory_callers"  # NOTIFY'd when the callers change
# The channel's statements run on the event loop (`server.postgres.sessions`): none holds it longer than this. A
# statement the database does not answer ends at the statement timeout, and one behind a silent partition when its
# bytes stay unacknowledged as long (libpq's TCP user timeout, where other connections keep the 15 s of
# `connection.TCP_USER_TIMEOUT_MS`). The channel's statements are a few hundred bytes each: a network that
# acknowledges none of them for seconds is down, not slow.
STATEMENT_TIMEOUT_MS = 5000

M001_CHANNEL = """
CREATE TABLE sessions(
    id BYTEA PRIMARY KEY,                   -- the 16-byte session id the client sends
    caller TEXT NOT NULL,
    static_key BYTEA NOT NULL,              -- the device key's X25519 form (public)
    sealed_keys BYTEA NOT NULL,             -- nonce | XChaCha20-Poly1305(receive key | send key), AD = id
    created DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    last_used DOUBLE PRECISION NOT NULL,
    send_next BIGINT NOT NULL DEFAULT 0     -- response nonces below this are leased to a replica already
);
CREATE INDEX sessions_by_key ON sessions(static_key);
CREATE INDEX sessions_by_caller ON sessions(caller, created);
CREATE INDEX sessions_by_expiry ON sessions(expires_at);
CREATE TABLE counters(                      -- request frame counters accepted, once per session
    session_id BYTEA NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    counter BIGINT NOT NULL,
    PRIMARY KEY(session_id, counter)
);
CREATE TABLE request_ids(                   -- request ids opened, once per device key for a session lifetime
    static_key BYTEA NOT NULL,
    request_id BYTEA NOT NULL,
    opened_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY(static_key, request_id)
);
CREATE INDEX request_ids_by_age ON request_ids(opened_at);
CREATE TABLE timestamps(                    -- the newest msg1 timestamp accepted per device key (ns)
    static_key BYTEA PRIMARY KEY,
    latest BIGINT NOT NULL
);
CREATE TABLE callers(                       -- callers.toml's text, one version for every replica
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL,
    document TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
"""

MIGRATIONS: tuple[str, ...] = (M001_CHANNEL,)


def open_channel_db(url: str, settings: Mapping[str, str] | None = None) -> PgConnection:
    """A connection whose search path is the channel's schema, the schema created or brought up to date. Requests
    wait on its statements: a database that stalls or a network that drops them gives errors (503s) after
    STATEMENT_TIMEOUT_MS, not a server frozen longer, and a statement that failed is not sent again on a new
    connection at once, which behind a partition would wait out the connect timeout on the event loop
    (`server.postgres.outage` connects again on a thread of its own). `settings`: more run-time parameters."""
    settings = {"statement_timeout": str(STATEMENT_TIMEOUT_MS), **(settings or {})}
    db = PgConnection(url, SCHEMA, settings, resend=False, connect={"tcp_user_timeout": STATEMENT_TIMEOUT_MS})
    try:
        migrate(db, SCHEMA, MIGRATIONS)
    except BaseException:
        db.close()
        raise
    return db
