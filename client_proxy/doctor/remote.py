"""`memory-proxy doctor`'s checks that talk to the server: reachable, handshake and pinned key, grant, clock.

The clock is compared with the server time the handshake's answer carries (the server sends no `Date` header).

Each returns a `Result` (see `checks.py`). Nothing here writes: the grant check asks for the changes after the
revision this laptop already has and reads only the answer's status.
"""

from __future__ import annotations

import shlex
from typing import Final

import httpx2

from channel.constants import INDEX_HEADER
from channel.errors import ClockOff, HandshakeRefused, ServerKeyMismatch
from channel.keys import PrivateKey
from channel.transport import ChannelTransport
from client_proxy.config import ProxyConfig
from client_proxy.doctor.checks import Result
from client_proxy.forward.upstream import describe
from client_proxy.remote.connection import channel_transport
from client_proxy.settings import RunSettings
from client_proxy.sync.state import StateCorruptError, StateStore
from syncproto.wire import CHANGES_PATH

TIMEOUT: Final = httpx2.Timeout(10.0)
HEALTH_PATH: Final = "/healthz"
MAX_SKEW: Final = 30.0  # seconds; the server refuses handshakes past 300 (channel.constants.CLOCK_WINDOW)
INNER_BASE: Final = "http://memory"


async def check_reachable(config: ProxyConfig) -> Result:
    """`GET /healthz` answers."""
    try:
        async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
            response = await client.get(config.server_url.rstrip("/") + HEALTH_PATH)
    except httpx2.HTTPError as exc:
        return Result(False, f"server: {describe(exc, config.server_url)}", _start_fix(config))
    if response.status_code != 200:
        return Result(
            False,
            f"server: {config.server_url}{HEALTH_PATH} answered HTTP {response.status_code}, not a memory server",
            _start_fix(config),
        )
    return Result(True, f"server: {config.server_url} is up")


def check_clock(offset: float | None) -> Result:
    """This laptop's clock is within `MAX_SKEW` of the server's (`offset`: how far it is ahead, in seconds)."""
    if offset is None:
        return Result(None, "clock: not checked (no handshake)")
    where = f"{abs(offset):.0f} s {'ahead of' if offset > 0 else 'behind'} the server's"
    if abs(offset) > MAX_SKEW:
        return Result(False, f"clock: this laptop's clock is {where}", "turn on network time (NTP) on both machines")
    return Result(True, f"clock: within {MAX_SKEW:.0f} s of the server's ({where})")


async def check_channel(
    config: ProxyConfig, key: PrivateKey, settings: RunSettings, index: str | None
) -> tuple[list[Result], float | None]:
    """The handshake (the pinned key, this device let in), then the grant for the project's index; and the clock
    offset the handshake measured."""
    transport = channel_transport(config, key)
    async with httpx2.AsyncClient(transport=transport, base_url=INNER_BASE, timeout=TIMEOUT) as client:
        results = await _check_channel(client, transport, config, settings, index)
    return results, transport.clock_offset


async def _check_channel(
    client: httpx2.AsyncClient,
    transport: ChannelTransport,
    config: ProxyConfig,
    settings: RunSettings,
    index: str | None,
) -> list[Result]:
    try:
        await transport.connect()
    except ServerKeyMismatch as exc:
        fix = (
            f"ask the operator for `memory-server keys show`; if its fingerprint is {exc.presented}, run: "
            f"memory-proxy init --server {config.server_url} --server-key LINE"
        )
        return [Result(False, f"handshake: the server's key {exc.presented} is not the pinned {exc.pinned}", fix)]
    except ClockOff as exc:
        return [Result(False, f"handshake: {exc}", "turn on network time (NTP) on both machines")]
    except HandshakeRefused as exc:
        return [Result(False, f"handshake: {exc}", _admit_fix(config, index or "INDEX"))]
    except (httpx2.HTTPError, OSError) as exc:
        return [Result(False, f"handshake: {describe(exc, config.server_url)}", _start_fix(config))]
    pinned = Result(True, f"handshake: pinned key {config.server_key.fingerprint}, device {config.device_name}")
    if index is None:
        return [pinned, Result(False, "grant: no index chosen", "memory-proxy init ... --index NAME")]
    return [pinned, await _check_grant(client, config, settings, index)]


async def _check_grant(client: httpx2.AsyncClient, config: ProxyConfig, settings: RunSettings, index: str) -> Result:
    try:
        state = StateStore(settings.state_home, config.server_url, index, settings.sync_root).read()
    except StateCorruptError:
        state = None
    since = state.revision if state else 0
    params = {"since": since, "wait": 0}
    try:
        async with client.stream("GET", CHANGES_PATH, params=params, headers={INDEX_HEADER: index}) as response:
            status = response.status_code
    except httpx2.HTTPError as exc:
        return Result(False, f"grant: {describe(exc, config.server_url)}", _start_fix(config))
    if status == 403:
        fix = f"on the server: memory-server callers grant {config.device_name} {index}=rw"
        return Result(False, f"grant: device {config.device_name} may not use index {index}", fix)
    if status != 200:
        return Result(False, f"grant: the server answered HTTP {status} for index {index}", "see the server's log")
    read_only = " (read-only here: a push was refused)" if state and state.read_only else ""
    return Result(True, f"grant: device {config.device_name} may use index {index}{read_only}")


def _start_fix(config: ProxyConfig) -> str:
    return f"start the server (memory-server serve), or correct server_url in {config.home / 'proxy.toml'}"


def _admit_fix(config: ProxyConfig, index: str) -> str:
    line = shlex.quote(config.device_public.line())
    return f"on the server: memory-server callers add {config.device_name} --key {line} --grant {index}=rw"
