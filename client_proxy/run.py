"""`memory-proxy run`: wire the forwarder to this process's stdio, the channel and the lifetime of its parent, with
the file sync of the project folder (`client_proxy.sync.syncer`) beside it on the same channel client.

The process ends when stdin closes, when stdout's reader goes away, on SIGTERM, SIGINT or SIGHUP, or when the
parent that launched it is gone (checked every second: a parent killed hard may leave the pipes open). A broken
configuration (no proxy.toml, no index, an unreadable key) does not stop the process: Claude Code would only say
the server failed to start, so each request is answered with the error instead, which it shows.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Final

import anyio
import anyio.abc
import httpx2

from channel.errors import ChannelError
from channel.keys import read_private_key
from client_proxy.config import ProxyConfig
from client_proxy.errors import ProxyError
from client_proxy.forward.forwarder import Forwarder, Lines, Write
from client_proxy.forward.jsonrpc import SERVER_UNAVAILABLE, NotJsonRpcError, error_line, parse
from client_proxy.forward.stdio import StdoutClosedError, StdoutWriter, claim_stdio, stdin_lines
from client_proxy.forward.upstream import Upstream
from client_proxy.remote.connection import channel_client
from client_proxy.settings import RunSettings
from client_proxy.sync.api import SyncApi
from client_proxy.sync.local_files import LocalFiles
from client_proxy.sync.scope import DEFAULT_MAX_FILE_BYTES
from client_proxy.sync.state import StateStore
from client_proxy.sync.syncer import Syncer
from client_proxy.sync.watcher import Wakeup, Watcher
from client_proxy.transcripts.upload import TranscriptState, TranscriptUploader
from client_proxy.tuning import LaptopTuning

log = logging.getLogger(__name__)

PARENT_POLL: Final = 1.0  # seconds


async def serve(settings: RunSettings) -> None:
    """Forward between this process's stdio and the server until one of the ends goes away."""
    parent = os.getppid()  # now, before anything is announced: the parent may die at any moment after
    with claim_stdio() as (stdin, stdout):
        writer = StdoutWriter(stdout)
        async with stdin_lines(stdin) as lines, anyio.create_task_group() as watchers:
            watchers.start_soon(_watch_parent, parent, watchers.cancel_scope)
            watchers.start_soon(_watch_signals, watchers.cancel_scope)
            try:
                config = ProxyConfig.load(settings.home)
                index = settings.index_for(config)
                key = read_private_key(config.device_key_path)
                tuning = LaptopTuning.resolve(os.environ, config.tuning)
            except (ProxyError, ChannelError) as exc:
                log.error("%s", exc)
                await _refuse(lines, writer.write, f"memory-proxy is not set up: {exc}")
            else:
                log.info(
                    "forwarding to %s, index %s, time zone %s, project %s",
                    config.server_url,
                    index,
                    settings.timezone,
                    settings.project,
                )
                async with (
                    channel_client(config, key, index, settings.timezone) as client,
                    anyio.create_task_group() as syncing,
                ):
                    _start_sync(syncing, client, settings, config, index, tuning)
                    await Forwarder(Upstream(client), writer.write, config.server_url).run(lines)
                    syncing.cancel_scope.cancel()  # the syncer flushes its state file on the way out
            watchers.cancel_scope.cancel()


def _start_sync(
    tasks: anyio.abc.TaskGroup,
    client: httpx2.AsyncClient,
    settings: RunSettings,
    config: ProxyConfig,
    index: str,
    tuning: LaptopTuning,
) -> None:
    """File sync and transcript upload beside the forwarder, on the same client, whether or not MCP traffic ever
    comes."""
    choice = settings.sync_choice(config)
    log.info("file sync %s", choice.reason)
    if choice.enabled:
        tasks.start_soon(_sync, client, settings, config, index, tuning)
    transcripts = settings.transcripts_choice(config)
    log.info("session transcripts %s", transcripts.reason)
    if transcripts.enabled:
        tasks.start_soon(_upload_transcripts, client, settings, config, index, tuning)


async def _upload_transcripts(
    client: httpx2.AsyncClient, settings: RunSettings, config: ProxyConfig, index: str, tuning: LaptopTuning
) -> None:
    """Upload session transcripts until cancelled. Never raises: it must not end the forwarding."""
    try:
        state = TranscriptState(settings.state_home, config.server_url, index, settings.sync_root)
        uploader = TranscriptUploader(
            SyncApi(client),
            settings.sync_root,
            os.environ,
            state,
            laptop=config.device_name,
            server_url=config.server_url,
            delta_bytes=tuning.transcripts_delta_bytes,
            delta_lines=tuning.transcripts_delta_lines,
        )
        await uploader.run()
    except Exception:
        log.exception("transcripts: stopped by an internal error; forwarding goes on")


async def _sync(
    client: httpx2.AsyncClient, settings: RunSettings, config: ProxyConfig, index: str, tuning: LaptopTuning
) -> None:
    """Sync the project folder until cancelled. Never raises: a failing sync must not end the forwarding."""
    project = settings.sync_root
    if not project.is_dir():
        log.error("sync: no folder %s: file sync is off", project)
        return
    try:
        wakeup = Wakeup.debounced(tuning.debounce_seconds)
        files = LocalFiles(project, exclude=config.sync_exclude, max_bytes=DEFAULT_MAX_FILE_BYTES)
        store = StateStore(settings.state_home, config.server_url, index, project)
        watcher = Watcher(project, wakeup)
        await Syncer(SyncApi(client), files, store, server_url=config.server_url, wakeup=wakeup, watcher=watcher).run()
    except Exception:
        log.exception("sync: stopped by an internal error; forwarding goes on")


async def _refuse(lines: Lines, write: Write, reason: str) -> None:
    """Answer every request with `reason` until stdin ends."""
    async for line in lines:
        try:
            message = parse(line) if line is not None else None
        except NotJsonRpcError:
            continue
        if message is not None and message.is_request:
            try:
                await write(error_line(message.id, SERVER_UNAVAILABLE, reason))
            except StdoutClosedError:
                return


async def _watch_parent(parent: int, scope: anyio.CancelScope) -> None:
    while os.getppid() == parent:
        await anyio.sleep(PARENT_POLL)
    log.info("the parent process is gone: shutting down")
    scope.cancel()


async def _watch_signals(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return
