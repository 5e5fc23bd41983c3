"""A server sharing the database that vanishes while it holds something (a host gone, a partition, a connection
cut): what it held is let go soon enough for the other servers, and what it was doing stops rather than going on
without it.

The database learns of a vanished server only from its session: one left idle inside a transaction is ended after
the idle-in-transaction timeout, and an idle connection whose peer stopped answering is found by the database's
own keepalive probes (over TCP only: these tests' PostgreSQL for that listens on 127.0.0.1, and iptables cuts it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from urllib.parse import urlsplit

import psycopg
import pytest

from server.errors import EngineError
from server.index.chunker import ChunkerConfig
from server.index.embeddings.base import InputKind
from server.index.engine_settings import EngineSettings
from server.postgres import search
from server.postgres.connection import SESSION_SETTINGS, PgConnection, schema_of
from server.postgres.notify import ChangeListener
from server.postgres.queries import lock_revision
from server.postgres.search import PgSearchIndex
from tests.fakes.embedder import HashingEmbedder
from tests.postgres_support import Partition, database_url, fresh_database, iptables_usable, start_postgres_on_tcp
from tests.server.postgres.conftest import Opened
from tests.sync_support import eventually

BOUND_SECONDS = 30  # every wait here ends by then, whatever happens

REBUILD_HOLDER = (
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('index_proj:rebuild', 0)"
)
LISTENING = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
ADVISORY_HOLDERS = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = " + (
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


def terminate(url: str, pids: Sequence[int]) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_server_gone_in_the_middle_of_a_write_holds_the_other_servers_writes_only_until_its_session_ends(
    open_index: Callable[..., Opened], postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SESSION_SETTINGS, "idle_in_transaction_session_timeout", "1000")  # the product's 60 s
    _, store = open_index()
    store.write("memory/b.md", "first\n", caller="bob")
    gone = PgConnection(postgres_url, schema_of("proj"))
    gone.__enter__()  # a write begun: the index's revision row locked, as the store's write locks it ...
    gone.execute(*lock_revision())  # ... and then nothing more from that server
    written = threading.Event()

    def write() -> None:
        store.write("memory/b.md", "second\n", caller="bob")
        written.set()

    writer = threading.Thread(target=write, daemon=True)
    try:
        writer.start()
        assert written.wait(BOUND_SECONDS), "the other server's write still waits on the vanished one's lock"
        written_file = store.read("memory/b.md")
        assert written_file is not None and written_file.text == "second\n"
        with pytest.raises(EngineError):  # its session was ended: what it began is not committed
            gone.execute("SELECT 1")
    finally:
        pid = gone.backend_pid()
        terminate(postgres_url, [pid] if pid is not None else [])
        writer.join(BOUND_SECONDS)
        gone.close()


class PausedModel(HashingEmbedder):
    """A model whose first batch of documents waits until `go` is set (`inside` tells it has begun)."""

    def __init__(self) -> None:
        super().__init__()
        self.inside, self.go = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document"):  # type: ignore[no-untyped-def]
        if kind == "document" and not self.inside.is_set():
            self.inside.set()
            assert self.go.wait(BOUND_SECONDS)
        return super().embed(texts, kind=kind)


def test_an_indexing_run_whose_session_is_lost_stops_instead_of_going_on_without_the_indexing_lock(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    model = PausedModel()
    first, store = open_index(model, "first")
    second, _ = open_index(HashingEmbedder(), "second")
    text = "\n\n".join(f"## Topic {i}\n\nnotes about widget{i} for the team" for i in range(40))
    store.write("memory/notes.md", text, caller="alice")
    failures: list[BaseException] = []

    def index_first() -> None:
        try:
            first.index()
        except BaseException as exc:
            failures.append(exc)

    run = threading.Thread(target=index_first, daemon=True)
    run.start()
    try:
        assert model.inside.wait(BOUND_SECONDS)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            holders = [int(pid) for (pid,) in admin.execute(ADVISORY_HOLDERS)]
        assert len(holders) == 1  # the first server's indexing lock
        terminate(postgres_url, holders)  # its connection cut: the lock goes with its session
        report = second.index()  # the other server takes the lock and indexes the file
        assert report.files_indexed == 1
    finally:
        model.go.set()
        run.join(BOUND_SECONDS)
    assert [type(exc) for exc in failures] == [EngineError]  # its run stopped at the next statement
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SET search_path TO index_proj")
        rows = admin.execute("SELECT count(*), count(DISTINCT ordinal) FROM chunks").fetchall()
    assert rows[0][0] == rows[0][1] > 1  # the file's chunks once each
    assert first.index().files_indexed == 0  # its next run connects again and finds the file indexed


@pytest.fixture(scope="module")
def postgres_on_tcp() -> Iterator[tuple[str, str]]:
    if not iptables_usable():
        pytest.skip("needs root and a working iptables")
    with start_postgres_on_tcp() as urls:
        yield urls


@pytest.fixture
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The database gives up on a silent peer after idle + interval x count seconds, and no sooner than the TCP user
    timeout (Linux lets that decide once it is set): 1 + 1 x 2 s and 2 s here, the product's 30 + 10 x 3 s and 15 s."""
    shorter = {"tcp_keepalives_idle": "1", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "2"}
    for name, value in {**shorter, "tcp_user_timeout": "2000"}.items():
        monkeypatch.setitem(SESSION_SETTINGS, name, value)


def test_a_server_cut_off_by_the_network_loses_its_indexing_lock_once_the_database_stops_hearing_from_it(
    postgres_on_tcp: tuple[str, str], quick_probes: None
) -> None:
    # The cut-off server's connection is idle (it embeds between statements), not inside a transaction: only the
    # database's keepalive probes tell it the peer is gone.
    tcp_url, socket_url = postgres_on_tcp
    with fresh_database(tcp_url) as url:
        gone = PgConnection(url)
        partition = Partition(int(urlsplit(url).port or 0))
        try:
            gone.execute("SELECT pg_advisory_lock(16)")
            partition.cut()
            started = time.monotonic()
            local = database_url(socket_url, urlsplit(url).path.lstrip("/"))
            with psycopg.connect(local, autocommit=True) as other:  # over the socket: not cut off
                other.execute(f"SET lock_timeout = '{BOUND_SECONDS}s'")
                other.execute("SELECT pg_advisory_lock(16)")  # a lock_timeout error here: still held
            assert time.monotonic() - started < BOUND_SECONDS
        finally:
            partition.heal()
            gone.close()


@pytest.mark.anyio
async def test_a_server_cut_off_by_the_network_leaves_no_listening_connection_behind(
    postgres_on_tcp: tuple[str, str], quick_probes: None
) -> None:
    tcp_url, socket_url = postgres_on_tcp
    with fresh_database(tcp_url) as url:
        listener = ChangeListener(url, "index_proj", lambda: None, own_pid=lambda: None)
        partition = Partition(int(urlsplit(url).port or 0))
        local = database_url(socket_url, urlsplit(url).path.lstrip("/"))
        try:
            with psycopg.connect(local, autocommit=True) as observer:  # over the socket: not cut off

                def listening() -> int:
                    return int(observer.execute(LISTENING).fetchall()[0][0])

                await eventually(lambda: listening() == 1, "the listener to listen", within=BOUND_SECONDS)
                partition.cut()
                await eventually(lambda: listening() == 0, "the listener's session to end", within=BOUND_SECONDS)
        finally:
            partition.heal()
            listener.close()


class CountingModel(PausedModel):
    """A paused model that also counts the batches of documents it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document"):  # type: ignore[no-untyped-def]
        self.batches += kind == "document"
        return super().embed(texts, kind=kind)


def test_a_rechunk_whose_rebuild_lock_went_with_its_session_stops_at_its_next_turn(
    open_index: Callable[..., Opened], postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, store = open_index(HashingEmbedder(), "first")
    for n in range(3):
        store.write(f"memory/f{n}.md", f"# note {n}\n\n" + " ".join(f"w{n}x{j}" for j in range(120)), caller="t")
    first.index(rebuild_now=False)
    monkeypatch.setattr(search, "RECHUNK_FILES", 1)
    model = CountingModel()
    recut = PgSearchIndex(postgres_url, "proj", model, EngineSettings(chunker=ChunkerConfig(max_tokens=96)))
    try:
        rebuild = recut.start_background_rebuild()
        assert rebuild is not None and model.inside.wait(BOUND_SECONDS)  # inside its first turn
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            holders = admin.execute(REBUILD_HOLDER).fetchall()
        assert len(holders) == 1
        terminate(postgres_url, [holders[0][0]])  # its rebuild connection cut: the lock went with it
        model.go.set()
        rebuild.join(BOUND_SECONDS)
        assert not rebuild.is_alive() and model.batches == 1  # no file cut again after the lock was gone
    finally:
        model.go.set()
        recut.close()
