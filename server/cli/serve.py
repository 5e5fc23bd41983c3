"""`memory-server serve`: the data directory, the server key, the memory service and uvicorn, in that order.

On first run the data directory and the server's key pair are created and the lines an operator needs are
printed: the public key laptops pin, and how to let a laptop in. The server listens on 127.0.0.1 unless told
otherwise on the command line; an address other machines can reach is never taken from the environment or the
config file alone. With `MEMORY_METRICS_PORT`, Prometheus metrics are also served on a loopback-only listener.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shlex
import socket
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from channel.errors import ChannelError
from channel.keys import PrivateKey, read_private_key
from server.callers.config import CALLERS_FILE, CallersFileError
from server.callers.file import CallersFile, prepare_keys_dir, read_callers
from server.cli import admin as admin_cli
from server.cli.http_guard import (
    ACCEPT_BATCH,
    HEADER_TIMEOUT,
    KEEP_ALIVE_TIMEOUT,
    MAX_CONNECTIONS,
    FdLimitError,
    check_fd_limit,
)
from server.errors import EmbeddingError, EmbeddingUnavailableError, InvalidArgumentError
from server.index.embeddings import reference
from server.index.embeddings.select import is_loopback
from server.index.tuning import check_model_limit
from server.settings import Settings

if TYPE_CHECKING:
    import uvicorn

    from channel.store import SessionStore
    from server.index.embeddings.base import Embedder
    from server.index.embeddings.chain import ProviderChain
    from server.indexes.storage import Backend
    from server.postgres.callers import SharedCallers


log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN = 10  # seconds uvicorn waits for requests in flight (open SSE streams are cut after it)


def register(commands: Any, settings: Settings) -> None:
    """Add `serve` to the `memory-server` subcommands."""
    serve = commands.add_parser(
        "serve",
        help="run the server (creates the data directory and the server key on first run)",
        description=__doc__,
    )
    serve.add_argument(
        "--host",
        default=None,
        help=f"address to listen on (env MEMORY_HOST; default {settings.host}); an address other machines can "
        "reach must be given here, not only in the environment",
    )
    serve.add_argument("--port", type=int, default=None, help=f"TCP port (env MEMORY_PORT; default {settings.port})")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    # The web stack and the MCP SDK take most of a second to import: only this command pays for them.
    from server.app import create_app
    from server.cli.graceful import GracefulServer
    from server.memory.service import SERVER_VERSION, MemoryService
    from server.observe.metrics import sessions_collector
    from server.observe.metrics_app import ChannelMetrics, MetricsListener, service_metrics

    settings: Settings = args.settings
    host = args.host if args.host is not None else settings.host
    port = args.port if args.port is not None else settings.port
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(f"--port must be between 0 and 65535, not {port}")
    if args.host is None and not is_loopback(host):
        where = "MEMORY_HOST" if settings.origins.get("host") == "env" else f"host in {settings.config_file}"
        raise InvalidArgumentError(
            f"{where}={host} would let other machines connect; confirm it with `serve --host {host}`"
        )
    data_dir: Path = args.data_dir
    keys_dir: Path = args.keys_dir
    try:
        check_fd_limit(MAX_CONNECTIONS)
    except FdLimitError as exc:
        raise InvalidArgumentError(str(exc)) from None
    prepare_data_dir(data_dir)
    key = ensure_server_key(keys_dir, out=_stdout())
    callers, sessions = channel_state(settings, keys_dir, key)
    if not callers.config.callers:
        print_callers_hint(_keys_option(args), _stdout())
    providers, _reasons = settings.select_providers(os.environ)
    if providers:  # refused now rather than when the first index opens
        first_provider = providers.members[0]
        for engine in (settings.engine, *settings.engine.per_index.values()):
            check_model_limit(engine.chunker, first_provider.model, first_provider.max_tokens)
    first = providers.preferred()
    if first is not None and first.provider == "local":  # the others load on first use, if they ever are
        print(f"loading the embedding model {first.model} ...", file=_stdout(), flush=True)
        first.warm_up()
        check_local_model(first)
    settings = settings.with_reranker(os.environ)  # Voyage's reranker, when its key is configured
    backend = storage_backend(settings, data_dir, providers)
    service = MemoryService(data_dir, providers, settings.engine, redact_writes=settings.redact_writes, backend=backend)
    metrics = service_metrics(service)
    app = create_app(
        service,
        server_key=key,
        callers=callers,
        data_dir=data_dir,
        metrics=metrics,
        sessions=sessions,
        stateless_mcp=sessions is not None,  # replicas: any of them may get the next MCP request
    )
    metrics.collectors.append(sessions_collector(lambda: len(app.sessions)))
    listener = bind(host, port)
    scraper = None
    try:
        if settings.metrics_port is not None:
            scraper = MetricsListener(metrics, settings.metrics_host, settings.metrics_port)
        bound_host, bound_port = listener.getsockname()[:2]
        print(
            f"memory-server {SERVER_VERSION} listening on {_url(bound_host, bound_port)} "
            f"(data {data_dir}, keys {keys_dir}, key {key.public.fingerprint})",
            file=_stdout(),
            flush=True,
        )
        if scraper is not None:
            scraper.start()
            print(f"metrics on {_url(*scraper.address)}/metrics (loopback only)", file=_stdout(), flush=True)
        GracefulServer(uvicorn_config(ChannelMetrics(app, metrics)), on_stopping=service.stopping).run(
            sockets=[listener]
        )
    finally:
        if scraper is not None:
            scraper.close()
        listener.close()
    return 0


def check_local_model(embedder: Embedder) -> None:
    """Warn when this machine does not give the local model's reference vectors (embeddings.reference): other
    servers and the embedding cache hold vectors of the model as recorded. It still serves; they are near."""
    try:
        reference.check(embedder)
    except EmbeddingUnavailableError as exc:
        log.warning("%s; its vectors will not quite match those other machines made", exc)
    except EmbeddingError as exc:  # a model failing now fails its first real call too, and is reported there
        log.warning("the local model did not embed its reference sentences: %s", exc)


def uvicorn_config(
    app: Any,
    *,
    graceful: int = GRACEFUL_SHUTDOWN,
    max_connections: int = MAX_CONNECTIONS,
    header_timeout: float = HEADER_TIMEOUT,
) -> uvicorn.Config:
    """How uvicorn runs the app: our logging, no access log or banners, the lifespan required, and the limits of
    `server.cli.http_guard` (a deadline per request head, a connection cap that sheds idle sockets first)."""
    import uvicorn

    from server.cli.http_guard import guarded_h11

    return uvicorn.Config(
        app,
        log_config=None,  # our logging, configured by the CLI: stderr, MEMORY_LOG_LEVEL
        access_log=False,  # the channel logs each request with its caller; uvicorn would see only /v1/tunnel
        lifespan="on",
        http=guarded_h11(max_connections=max_connections, header_timeout=header_timeout),
        timeout_keep_alive=KEEP_ALIVE_TIMEOUT,
        backlog=ACCEPT_BATCH,  # asyncio accepts this many at once before any is shed: it bounds the overshoot
        ws="none",
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=graceful,
    )


def ensure_server_key(keys_dir: Path, *, out: TextIO) -> PrivateKey:
    """The server's private key, created (with the keys directory) when there is none yet."""
    key_path = keys_dir / admin_cli.SERVER_KEY_FILE
    try:
        if not (key_path.exists() or key_path.is_symlink()):
            print(f"first run: creating the server key in {keys_dir}", file=out)
            admin_cli.cmd_keys_init(argparse.Namespace(keys_dir=keys_dir, comment="memory-server", force=False))
        else:
            prepare_keys_dir(keys_dir)
        return read_private_key(key_path)
    except (ChannelError, CallersFileError) as exc:
        raise InvalidArgumentError(str(exc)) from None
    except OSError as exc:
        raise InvalidArgumentError(f"{exc.filename or keys_dir}: {exc.strerror}") from None


def print_callers_hint(keys_option: str, out: TextIO) -> None:
    print(
        "\nNo caller may connect yet. On a laptop run `memory-proxy init` (it prints the laptop's public line), "
        "then here:\n"
        f"  memory-server{keys_option} callers add NAME --key 'memory-ed25519 ... LAPTOP' --grant INDEX=rw\n"
        "A running server applies callers.toml changes within a second.\n",
        file=out,
        flush=True,
    )


def prepare_data_dir(path: Path) -> None:
    """The data directory, mode 0700 (it holds every index's memory files): created when missing, tightened when
    group or others may enter it, refused (with the command that fixes it) when this server cannot write it, or
    when others may write it and this server cannot change that. One shared through a group the server cannot
    tighten (Kubernetes' `fsGroup` volumes: root's, group-writable) is served with a warning. Refused now rather
    than at the first write, which would fail for a caller with no clue."""
    if not path.exists():
        path.mkdir(mode=0o700, parents=True)
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    elif not path.is_dir():
        raise InvalidArgumentError(f"the data directory {path} is not a directory")
    _check_writable(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        try:  # its owner may (or root); the files inside are then reachable only through it
            os.chmod(path, mode & ~0o077)
        except OSError:
            if mode & 0o002:
                raise InvalidArgumentError(
                    f"refusing the data directory {path}: mode {mode:04o} lets others replace the memory files in "
                    f"it, and this server (uid {os.geteuid()}) cannot change that; run: chmod 700 {path}"
                ) from None
            log.warning(
                "the data directory %s is mode %04o, open to group or others, and this server (uid %d) cannot change "
                "that; if no group is meant to share it, run: chmod 700 %s",
                path, mode, os.geteuid(), path,
            )  # fmt: skip
            return
        log.warning("the data directory %s was mode %04o, open to group or others; now %04o", path, mode, mode & ~0o077)


def _check_writable(path: Path) -> None:
    """Create and remove a file in `path`: the one test that also catches a read-only mount (and that root, whom
    `os.access` always answers yes, fails as anyone else does)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        uid, gid = os.geteuid(), os.getegid()
        fix = "mount it read-write" if exc.errno == errno.EROFS else f"run: chown -R {uid}:{gid} {path}"
        raise InvalidArgumentError(
            f"the data directory {path} is not writable by this server (uid {uid}): {exc.strerror}; {fix}"
        ) from None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket. Made here rather than by uvicorn: asyncio sets TCP_NODELAY only on sockets created
    with IPPROTO_TCP, and without it every small response waits ~40 ms for a delayed ACK."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
    except socket.gaierror as exc:
        raise InvalidArgumentError(f"cannot resolve --host {host}: {exc.strerror}") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise InvalidArgumentError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listener.set_inheritable(True)
    return listener


def _keys_option(args: argparse.Namespace) -> str:
    settings: Settings = args.settings
    return "" if args.keys_dir == settings.keys_dir else f" --keys-dir {shlex.quote(str(args.keys_dir))}"


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _stdout() -> TextIO:
    return sys.stdout  # looked up on each use, so a test's capture applies


def channel_state(
    settings: Settings, keys_dir: Path, key: PrivateKey
) -> tuple[CallersFile | SharedCallers, SessionStore | None]:
    """Who may connect and where sessions live: `callers.toml` and this process's memory, or with
    `MEMORY_DATABASE_URL` both in PostgreSQL, shared by every replica (the file imported on the first start). A
    file that is unsafe or does not parse stops the start in both cases (with PostgreSQL only when it is read: into
    an empty database)."""
    if settings.database_url is None:
        try:  # read strictly once here; while running, a broken edit keeps the last good version (CallersFile)
            read_callers(keys_dir / CALLERS_FILE)
        except CallersFileError as exc:
            raise InvalidArgumentError(str(exc)) from None
        return CallersFile(keys_dir / CALLERS_FILE), None
    import time

    from server.postgres.callers import SharedCallers
    from server.postgres.sessions import PgSessionStore

    try:  # the file is read once, into an empty database: a broken one stops the start
        callers = SharedCallers(settings.database_url, keys_dir / CALLERS_FILE)
    except CallersFileError as exc:
        raise InvalidArgumentError(f"{exc}; it is imported into the empty database on this first start") from None
    return callers, PgSessionStore(settings.database_url, key, time.time)


def storage_backend(settings: Settings, data_dir: Path, providers: ProviderChain) -> Backend:
    """Where the indexes live: PostgreSQL when `MEMORY_DATABASE_URL` names one, else SQLite under `data_dir`."""
    from server.indexes.storage import SqliteBackend
    from server.mirror.state import utc_now

    if settings.database_url is None:
        return SqliteBackend(data_dir, providers, settings.engine, utc_now, retention=settings.history)
    from server.postgres.backend import PgBackend

    return PgBackend(settings.database_url, data_dir, providers, settings.engine, utc_now, retention=settings.history)
