"""`memory-proxy doctor`'s checks that talk to the server: reachable, handshake and pinned key, grant, clock.

The clock is compared with the server time the handshake's answer carries (the server sends no `Date` header).

Each returns a `Result` (see `checks.py`). Nothing here writes: the grant check calls the `memory_status` tool, which
reports this device's access to the index and records nothing about it (a pull through `/sync/changes` would be
recorded as this laptop's, up to the newest revision, though it applied nothing).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from contextlib import suppress
from typing import Final

import anyio
import httpx2

from channel.constants import INDEX_HEADER
from channel.errors import ChannelError, ClockOff, HandshakeRefused, ServerKeyMismatch
from channel.keys import PrivateKey
from channel.transport import ChannelTransport
from client_proxy.config import ProxyConfig
from client_proxy.doctor.checks import Result
from client_proxy.doctor.indexes import IndexChoice
from client_proxy.forward.upstream import describe
from client_proxy.remote.connection import channel_transport
from client_proxy.remote.mcp_session import McpSession, RemoteCallError, RemoteToolError

TIMEOUT: Final = httpx2.Timeout(10.0)  # each step: connecting, each read, each write
HEALTH_PATH: Final = "/healthz"
# The whole `/healthz` check, however its answer trickles in; past TIMEOUT, so a step that times out is named as such.
HEALTH_DEADLINE: Final = 15.0  # seconds
# The handshake (one small message each way) and each grant check, however their answers trickle in.
HANDSHAKE_DEADLINE: Final = 30.0  # seconds
GRANT_DEADLINE: Final = 60.0  # seconds: memory_status looks at the index's files
MAX_HEALTH_BYTES: Final = 1024  # the server answers {"status":"ok"}; more is another service, or something between
MAX_SKEW: Final = 30.0  # seconds; the server refuses handshakes past 300 (channel.constants.CLOCK_WINDOW)
INNER_BASE: Final = "http://memory"
STATUS_TOOL: Final = "memory_status"
FORBIDDEN: Final = 403  # the channel's answer to a request naming an index this device is not granted
LOG_FIX: Final = "see the server's log"
ACCESS: Final = {"rw": "read and write", "r": "read only: the server refuses this device's changes"}


async def check_reachable(config: ProxyConfig) -> Result:
    """`GET /healthz` answers 200 with a small body, all within `HEALTH_DEADLINE`."""
    url = config.server_url.rstrip("/") + HEALTH_PATH
    try:
        with anyio.fail_after(HEALTH_DEADLINE):
            async with _outer_client() as client, client.stream("GET", url) as response:
                status = response.status_code
                size = await _body_size(response, MAX_HEALTH_BYTES)
    except TimeoutError:
        return Result(
            False,
            f"server: {url} did not finish answering within {HEALTH_DEADLINE:g} s (its answer trickled in): "
            "not a memory server, or something between this laptop and it holds the answer back",
            _start_fix(config),
        )
    except httpx2.HTTPError as exc:
        return Result(False, f"server: {describe(exc, config.server_url)}", _start_fix(config))
    if status != 200:
        return Result(False, f"server: {url} answered HTTP {status}, not a memory server", _start_fix(config))
    if size > MAX_HEALTH_BYTES:
        return Result(
            False,
            f"server: {url} answered with more than {MAX_HEALTH_BYTES} bytes, not a memory server",
            _start_fix(config),
        )
    return Result(True, f"server: {config.server_url} is up")


def _outer_client() -> httpx2.AsyncClient:
    """A client that reaches the server as the channel does: directly, never through a proxy named in the environment
    (`HTTP_PROXY`: the channel's outer transport takes none; a client given its transport reads none), with the same
    TLS trust as the channel's `httpx2.AsyncHTTPTransport()`."""
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(), timeout=TIMEOUT, trust_env=False)


async def _body_size(response: httpx2.Response, limit: int) -> int:
    """How many bytes the body holds, reading no more than just past `limit` (an endless answer is cut there)."""
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            break
    return size


def check_clock(offset: float | None) -> Result:
    """This laptop's clock is within `MAX_SKEW` of the server's (`offset`: how far it is ahead, in seconds)."""
    if offset is None:
        return Result(None, "clock: not checked (no handshake)")
    where = f"{abs(offset):.0f} s {'ahead of' if offset > 0 else 'behind'} the server's"
    if abs(offset) > MAX_SKEW:
        return Result(False, f"clock: this laptop's clock is {where}", "turn on network time (NTP) on both machines")
    return Result(True, f"clock: within {MAX_SKEW:.0f} s of the server's ({where})")


async def check_channel(
    config: ProxyConfig, key: PrivateKey, choices: Sequence[IndexChoice]
) -> tuple[list[Result], float | None]:
    """The handshake (the pinned key, this device let in), then the grant for each index chosen (`indexes.py`); and
    the clock offset the handshake measured."""
    transport = channel_transport(config, key)
    statuses: list[int] = []

    async def note(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    hooks = {"response": [note]}
    async with httpx2.AsyncClient(transport=transport, base_url=INNER_BASE, timeout=TIMEOUT, event_hooks=hooks) as (
        client
    ):
        results = await _check_channel(client, transport, config, choices, statuses)
    return results, transport.clock_offset


async def _check_channel(
    client: httpx2.AsyncClient,
    transport: ChannelTransport,
    config: ProxyConfig,
    choices: Sequence[IndexChoice],
    statuses: list[int],
) -> list[Result]:
    try:
        with anyio.fail_after(HANDSHAKE_DEADLINE):
            await transport.connect()
    except TimeoutError:
        line = f"handshake: {config.server_url} did not finish the channel handshake within {HANDSHAKE_DEADLINE:g} s"
        return [Result(False, line, _start_fix(config))]
    except ServerKeyMismatch as exc:
        fix = (
            f"ask the operator for `memory-server keys show`; if its fingerprint is {exc.presented}, run: "
            f"memory-proxy init --server {config.server_url} --server-key LINE"
        )
        return [Result(False, f"handshake: the server's key {exc.presented} is not the pinned {exc.pinned}", fix)]
    except ClockOff as exc:
        return [Result(False, f"handshake: {exc}", "turn on network time (NTP) on both machines")]
    except HandshakeRefused as exc:
        named = next((choice.name for choice in choices if choice.name), None)
        return [Result(False, f"handshake: {exc}", _admit_fix(config, named or "INDEX"))]
    except (httpx2.HTTPError, OSError, ChannelError) as exc:  # a corrupt answer (ProtocolError) carries no message
        return [Result(False, f"handshake: {describe(exc, config.server_url)}", _start_fix(config))]
    pinned = Result(True, f"handshake: pinned key {config.server_key.fingerprint}, device {config.device_name}")
    if not choices:
        fix = 'memory-proxy install-claude --index NAME (or add index = "NAME" to proxy.toml)'
        return [pinned, Result(False, "grant: no index chosen", fix)]
    grants = []
    for choice in choices:
        if choice.name is None:
            grants.append(Result(False, f"grant: {choice.fault}", choice.fix))
            continue
        statuses.clear()
        try:
            with anyio.fail_after(GRANT_DEADLINE):
                grants.append(await _check_grant(client, config, choice, choice.name, statuses))
        except TimeoutError:
            line = f"grant: {config.server_url} did not answer {STATUS_TOOL} within {GRANT_DEADLINE:g} s"
            grants.append(Result(False, line, LOG_FIX))
    return [pinned, *grants]


async def _check_grant(
    client: httpx2.AsyncClient, config: ProxyConfig, choice: IndexChoice, index: str, statuses: list[int]
) -> Result:
    """This device's access to `index`, as `memory_status` reports it; a 403 when the index is not granted."""
    client.headers[INDEX_HEADER] = index
    session = McpSession(client, config.server_url)
    try:
        status = await session.call_tool(STATUS_TOOL, {})
    except RemoteToolError as exc:
        return Result(False, f"grant: {STATUS_TOOL} on index {index} failed: {exc} ({choice.source})", LOG_FIX)
    except RemoteCallError as exc:
        if FORBIDDEN in statuses:
            fix = f"on the server: memory-server callers grant {config.device_name} {index}=rw"
            if choice.registered:
                fix += ", or name a granted index: memory-proxy install-claude --index NAME"
            return Result(False, f"grant: device {config.device_name} may not use index {index} ({choice.source})", fix)
        return Result(False, f"grant: {exc}", _start_fix(config))
    except (httpx2.HTTPError, ChannelError) as exc:  # McpSession translates these; one that slips past is named too
        return Result(False, f"grant: {describe(exc, config.server_url)}", _start_fix(config))
    finally:
        with suppress(httpx2.HTTPError, ChannelError, RemoteCallError):
            await session.close()
    access = ACCESS.get(str(status.get("access")))
    if access is None:
        return Result(False, f"grant: the server's {STATUS_TOOL} names no access to index {index}", LOG_FIX)
    return Result(True, f"grant: device {config.device_name} may use index {index}, {access} ({choice.source})")


def _start_fix(config: ProxyConfig) -> str:
    return f"start the server (memory-server serve), or correct server_url in {config.home / 'proxy.toml'}"


def _admit_fix(config: ProxyConfig, index: str) -> str:
    line = shlex.quote(config.device_public.line())
    return (
        f"on the server: memory-server callers add {config.device_name} --key {line} --grant {index}=rw (a key once"
        " revoked is refused for good: then make a new one here with memory-proxy init --force, and add that)"
    )
