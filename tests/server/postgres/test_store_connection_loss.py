"""The channel's store (`server.postgres.sessions`, `server.postgres.outage`) when its connection to the database is
lost at the worst moments: the answer to a request's commit lost after the database committed it, and a database
that stops answering connections (a partition dropping packets) while the server's event loop keeps serving. A
relay in front of the test's PostgreSQL makes both happen, with no root needed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from channel.errors import StoreUnavailable
from channel.keys import PrivateKey
from server.errors import EngineError
from server.postgres.connection import CONNECT_OPTIONS, PgConnection
from server.postgres.outage import OUTAGE_FIRST_SECONDS, OUTAGE_MAX_SECONDS
from server.postgres.sessions import PgSessionStore
from tests.channel.test_session import Clock
from tests.server.postgres.test_session_store import new_session, stamp

SERVER = PrivateKey.generate("server")
CONNECT_TIMEOUT = 2  # seconds, the product's 10 shortened for the test (libpq's least)
AT_ONCE = 1.0  # seconds a refused call may take at most (it must not wait for a connection)
CHUNK = 65536


class Relay:
    """127.0.0.1:`port` to the test PostgreSQL's Unix socket, a thread per direction of each connection.

    `lose_answer_to(marker)`: the answer to the next statement whose text holds `marker` is thrown away and its
    connection closed (the statement ran; `lost` is set). `silence()`: the connections relayed are cut and new ones
    are accepted but never answered, as behind a partition that drops packets; `heal()` ends that. `hold_ends()`:
    a connection the database ends has its last bytes passed on but not its end (`holding` is set) until
    `release_ends()`."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.lost = threading.Event()
        self._marker: bytes | None = None
        self._silent = False
        self._lock = threading.Lock()
        self._relayed: list[socket.socket] = []
        self._held: list[socket.socket] = []
        self._hold_ends = False
        self.holding = threading.Event()
        self._released = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def lose_answer_to(self, marker: bytes) -> None:
        self._marker = marker

    def silence(self) -> None:
        with self._lock:
            self._silent = True
            for end in self._relayed:
                _shut(end)

    def hold_ends(self) -> None:
        self._hold_ends = True

    def release_ends(self) -> None:
        self._released.set()

    def heal(self) -> None:
        with self._lock:
            self._silent = False
            for held in self._held:  # a connection attempt under way fails now rather than at its timeout
                _shut(held)

    def close(self) -> None:
        _shut(self._listener)
        with self._lock:
            ends = [*self._relayed, *self._held]
        for end in ends:
            _shut(end)
        self._threads[0].join(10)  # the accepting thread: no pump starts after it
        for thread in self._threads:
            thread.join(10)
        for end in [self._listener, *ends]:
            end.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._silent:
                    self._held.append(client)
                    continue
                server = socket.socket(socket.AF_UNIX)
                self._relayed += [client, server]
            server.connect(self._upstream)
            lose = threading.Event()  # set once the client sent the statement whose answer is lost
            pumps = [
                threading.Thread(target=self._pump, args=(client, server, lose, False), daemon=True),
                threading.Thread(target=self._pump, args=(server, client, lose, True), daemon=True),
            ]
            self._threads += pumps
            for pump in pumps:
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket, lose: threading.Event, answers: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(CHUNK):
                if answers and lose.is_set():
                    self.lost.set()
                    break
                if not answers and self._marker is not None and self._marker in data:
                    self._marker = None
                    lose.set()
                sink.sendall(data)
            else:  # the source ended its stream
                if answers and self._hold_ends:
                    self.holding.set()
                    self._released.wait(30)
        _shut(source)
        _shut(sink)


def _shut(end: socket.socket) -> None:
    with contextlib.suppress(OSError):
        end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def relayed(postgres_url: str) -> Iterator[tuple[Relay, str]]:
    """A relay in front of the test database, and the database's URL through it."""
    parts = urlsplit(postgres_url)
    relay = Relay(f"{parse_qs(parts.query)['host'][0]}/.s.PGSQL.5432")
    try:
        yield relay, f"postgresql://{parts.username or 'postgres'}@127.0.0.1:{relay.port}{parts.path}"
    finally:
        relay.close()


def test_a_request_whose_commit_was_answered_into_a_lost_connection_is_not_refused_as_a_replay(relayed):
    # The commit ran and its rows are there, but nobody saw its answer: the request has not run, so calling it
    # a replay would refuse a genuine request. Unavailable (a 503) or accepted are both true answers.
    relay, url = relayed
    clock = Clock()
    store = PgSessionStore(url, SERVER, clock)
    try:
        session = new_session(clock)
        assert store.open(session, stamp(clock))
        assert store.commit_request(session, 0, b"a" * 16) is None
        relay.lose_answer_to(b"INSERT INTO counters")
        try:
            verdict = store.commit_request(session, 1, b"b" * 16)
        except StoreUnavailable:
            verdict = "unavailable"
        assert relay.lost.is_set(), "the answer to the commit was lost"
        assert verdict in (None, "unavailable")
        clock.now += OUTAGE_FIRST_SECONDS  # past the outage's backoff, if there was one
        assert store.commit_request(session, 2, b"c" * 16) is None  # the session serves on
    finally:
        store.close()


def test_while_connecting_hangs_a_call_due_to_reconnect_is_refused_at_once_and_calls_succeed_once_it_answers(
    relayed, monkeypatch
):
    # The store's calls run on the server's event loop: a connection attempt made there while packets vanish
    # would hold every request of the server (even /healthz) for the whole connect timeout, at every retry.
    relay, url = relayed
    monkeypatch.setitem(CONNECT_OPTIONS, "connect_timeout", CONNECT_TIMEOUT)
    clock = Clock()
    store = PgSessionStore(url, SERVER, clock)
    key = bytes(32)
    try:
        assert store.timestamp_is_fresh(key, 1)
        relay.silence()
        with pytest.raises(StoreUnavailable):  # how the loss is found: the statement fails, connecting again too
            store.timestamp_is_fresh(key, 1)
        clock.now += OUTAGE_MAX_SECONDS  # the backoff passed: a connection is tried again
        started = time.monotonic()
        for _ in range(5):
            with pytest.raises(StoreUnavailable):
                store.timestamp_is_fresh(key, 1)
        assert time.monotonic() - started < AT_ONCE, "refused at once, not after a connection attempt"
        relay.heal()
        assert store._outage.wait(CONNECT_TIMEOUT + 5), "the attempt under way ends"
        clock.now += OUTAGE_MAX_SECONDS
        assert store.timestamp_is_fresh(key, 1)
        assert store.timestamp_is_fresh(key, 2)
    finally:
        store.close()


def test_a_session_the_database_ended_is_found_by_its_goodbye_before_the_end_of_its_stream_arrives(
    relayed, postgres_url
):
    # A restart's goodbye reaches the connection first, the end of its stream a moment later. A statement sent in
    # between, never sent twice on the channel's connection, was lost into the ended session: a 503 for a request
    # that never reached the database, where a new connection answers it.
    relay, url = relayed
    db = PgConnection(url, resend=False)
    try:
        relay.hold_ends()
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (db.backend_pid(),))
        assert relay.holding.wait(10), "the goodbye was passed on, the end of the stream held"
        assert db.execute("SELECT 2").fetchall() == [(2,)]
    finally:
        relay.release_ends()
        db.close()


def test_a_closed_connection_is_not_opened_again_by_a_late_statement(postgres_url):
    db = PgConnection(postgres_url)
    db.close()
    with pytest.raises(EngineError):
        db.execute("SELECT 1")
    assert db.backend_pid() is None
