"""The channel end to end under attack: every one of these fails closed, and says nothing useful to the attacker.

Real uvicorn on 127.0.0.1, the real client transport, and a `Relay` playing the hostile network in between.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time

import anyio
import httpx2
import pytest

from channel.caller_load import CallerLimits
from channel.constants import (
    CLOCK_OFF,
    CLOCK_WINDOW,
    HANDSHAKE_PATH,
    HELLO_LEN,
    KIND_HELLO,
    KIND_REQUEST,
    SESSION_HEADER,
    SESSION_IDLE,
    SESSION_LIFETIME,
    TAG_LEN,
    TUNNEL_PATH,
    VERSION,
)
from channel.errors import FrameError, HandshakeError, HandshakeRefused, ServerKeyMismatch, TunnelRefused
from channel.handshake import create_initiation
from channel.keys import PrivateKey
from channel.ratelimit import Rate
from channel.session import SessionTable
from tests.channel.apps import WAIT, AppState, caller, inner_app, table
from tests.channel.conftest import LOW_ORDER, MutableDirectory, serve_channel
from tests.channel.relay import Answer, Outer, Relay

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")
OTHER_DEVICE = PrivateKey.generate("bob@laptop")
STRANGER = PrivateKey.generate("mallory")
IMPOSTOR = PrivateKey.generate("not the server")


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def state() -> AppState:
    return AppState()


@pytest.fixture
def directory() -> MutableDirectory:
    return MutableDirectory(table(caller("alice", DEVICE, notes="rw"), caller("bob", OTHER_DEVICE, notes="r")))


@pytest.fixture
def server(serve, state, directory):
    return serve(inner_app(state), directory)


def mutations(message: bytes) -> list[bytes]:
    """Every byte flipped, every truncation, and two extensions."""
    flipped = [message[:i] + bytes((message[i] ^ 0x20,)) + message[i + 1 :] for i in range(len(message))]
    return [*flipped, *(message[:cut] for cut in range(len(message))), message + b"\x00", message * 2]


def msg1(key: PrivateKey, server, *, timestamp: int | None = None, **options) -> bytes:
    stamp = timestamp if timestamp is not None else time.time_ns()
    return create_initiation(key, server.server_key, stamp, os.urandom, **options)[0]


async def raw_post(relay: Relay, server, path: str, content: bytes, headers=()) -> Answer:
    return await relay.forward(Outer(httpx2.URL(server.url + path), list(headers), content))


def forged_frame() -> bytes:
    """What anyone who saw a session id can send under it: a request frame of the right layout, no key behind it."""
    return struct.pack(">BBQI", VERSION, KIND_REQUEST, 2**40, TAG_LEN) + bytes(TAG_LEN)


# -- identities --------------------------------------------------------------------------------------------------
async def test_a_client_pinned_to_another_key_stops_with_both_fingerprints(server, state):
    async with server.client(DEVICE, server_key=IMPOSTOR.public) as client:
        with pytest.raises(ServerKeyMismatch) as raised:
            await client.post("/count")
    assert raised.value.pinned == IMPOSTOR.public.fingerprint
    assert raised.value.presented == server.server_key.fingerprint
    assert IMPOSTOR.public.fingerprint in str(raised.value) and server.server_key.fingerprint in str(raised.value)
    assert state.count == 0


async def test_an_unknown_caller_key_is_refused(server, state):
    async with server.client(STRANGER) as client:
        with pytest.raises(HandshakeRefused, match=re.escape(STRANGER.public.fingerprint)) as raised:
            await client.post("/count")
    assert raised.value.status == 403 and state.count == 0


async def test_a_revoked_caller_is_refused_and_its_live_sessions_end_at_once(server, state, directory):
    async with server.client(DEVICE) as client, server.client(DEVICE) as second:
        assert (await client.post("/count")).status_code == 200
        assert (await second.post("/count")).status_code == 200
        assert len(server.middleware.sessions) == 2
        directory.table = table(caller("bob", OTHER_DEVICE, notes="r"))
        with pytest.raises(HandshakeRefused):
            await client.post("/count")  # its session answers 401, and the new handshake is refused
    assert len(server.middleware.sessions) == 0 and state.count == 2


async def test_the_handshake_rate_limit_applies_per_device_key(serve, state, directory):
    server = serve(inner_app(state), directory, handshake_rate=Rate(burst=2, per_second=0.001))
    for _ in range(2):
        async with server.client(DEVICE) as client:
            await client.get("/echo")
    async with server.client(DEVICE) as client:
        with pytest.raises(HandshakeRefused, match="too many handshakes") as raised:
            await client.get("/echo")
    assert raised.value.status == 429


# -- handshake messages ------------------------------------------------------------------------------------------
async def test_every_handshake_failure_gives_the_same_answer_and_a_mangled_msg1_commits_nothing(
    make_relay, server, directory
):
    relay = make_relay()
    stamp = time.time_ns()
    good = msg1(DEVICE, server, timestamp=stamp)
    refusals = []
    for mangled in mutations(good):
        refusals.append(await raw_post(relay, server, HANDSHAKE_PATH, mangled))
    others = [
        msg1(STRANGER, server),
        msg1(DEVICE, server, prologue=b"agent-memory channel v2"),
        bytes((2, KIND_HELLO)) + msg1(DEVICE, server)[2:],
        bytes((1, KIND_HELLO + 1)) + msg1(DEVICE, server)[2:],
        create_initiation(DEVICE, IMPOSTOR.public, time.time_ns(), os.urandom)[0],
        bytes(HELLO_LEN),
        b"",
        os.urandom(HELLO_LEN + 1),
        os.urandom(64 * 1024),
        *(good[:2] + bytes.fromhex(point) + good[34:] for point in LOW_ORDER),
    ]
    for message in others:
        refusals.append(await raw_post(relay, server, HANDSHAKE_PATH, message))
    accepted = await raw_post(relay, server, HANDSHAKE_PATH, good)  # the original still works: nothing committed
    refusals.append(await raw_post(relay, server, HANDSHAKE_PATH, good))  # but only once
    refusals.append(await raw_post(relay, server, HANDSHAKE_PATH, msg1(DEVICE, server, timestamp=stamp - 1)))
    directory.table = table()
    refusals.append(await raw_post(relay, server, HANDSHAKE_PATH, msg1(DEVICE, server)))  # revoked

    assert accepted.status == 200
    expected = refusals[0].comparable()
    assert expected[0] == 403 and expected[2] == b"handshake failed\n"
    assert all(refusal.comparable() == expected for refusal in refusals)


async def test_a_replayed_msg1_gets_the_generic_answer_whether_its_key_is_still_authorized_or_not(
    make_relay, serve, state, directory
):
    clock, relay = Clock(), make_relay()
    server = serve(inner_app(state), directory, clock=clock)
    recorded = msg1(DEVICE, server, timestamp=int(clock.now * 1e9))
    assert (await raw_post(relay, server, HANDSHAKE_PATH, recorded)).status == 200
    generic = await raw_post(relay, server, HANDSHAKE_PATH, b"")
    clock.now += CLOCK_WINDOW + 1  # now also outside the clock window
    authorized = await raw_post(relay, server, HANDSHAKE_PATH, recorded)
    clock.now += 3 * CLOCK_WINDOW  # the device handshakes again, long after
    assert (
        await raw_post(relay, server, HANDSHAKE_PATH, msg1(DEVICE, server, timestamp=int(clock.now * 1e9)))
    ).status == 200
    much_later = await raw_post(relay, server, HANDSHAKE_PATH, recorded)
    clock_ahead = await raw_post(
        relay, server, HANDSHAKE_PATH, msg1(DEVICE, server, timestamp=int((clock.now + 2 * CLOCK_WINDOW) * 1e9))
    )
    directory.table = table(caller("bob", OTHER_DEVICE, notes="r"))
    revoked = await raw_post(relay, server, HANDSHAKE_PATH, recorded)

    assert authorized.comparable() == generic.comparable()  # the old code: CLOCK_OFF while the key is authorized
    assert much_later.comparable() == revoked.comparable() == generic.comparable()
    assert (clock_ahead.status, clock_ahead.body) == (403, CLOCK_OFF)  # a new msg1 from a clock that is off


async def test_every_flipped_truncated_or_extended_msg2_stops_the_client(make_relay, server):
    replies: list[bytes] = []
    substitute: list[bytes] = []

    async def tamper(outer: Outer, forward) -> Answer:
        answer = await forward(outer)
        if outer.path != HANDSHAKE_PATH:
            return answer
        replies.append(answer.body)
        return Answer(answer.status, answer.headers, substitute.pop()) if substitute else answer

    relay = make_relay(tamper)
    async with server.client(DEVICE, transport=relay) as client:
        await client.get("/echo")
    for mangled in mutations(replies[0]):
        substitute.append(mangled)
        async with server.client(DEVICE, transport=relay) as client:  # a new client: a new handshake
            with pytest.raises(HandshakeError) as raised:
                await client.get("/echo")
        assert not isinstance(raised.value, HandshakeRefused)
    assert len(replies) == len(mutations(replies[0])) + 1


async def test_msg1_reflected_back_as_msg2_stops_the_client(make_relay, server):
    async def reflect(outer: Outer, forward) -> Answer:
        return Answer(200, [], outer.content)

    async with server.client(DEVICE, transport=make_relay(reflect)) as client:
        with pytest.raises(HandshakeError):
            await client.get("/echo")


# -- request frames ----------------------------------------------------------------------------------------------
async def test_every_flipped_truncated_or_extended_request_frame_gets_one_generic_answer_and_never_runs(
    make_relay, server, state
):
    template: list[bytes] = []
    substitutes: list[bytes] = []
    answers: list[Answer] = []

    async def tamper(outer: Outer, forward) -> Answer:
        if outer.path != TUNNEL_PATH:
            return await forward(outer)
        if not template:  # learn the exact frame the client sends, without delivering it (nothing is committed)
            template.append(outer.content)
            return Answer(503)
        answers.append(await forward(outer.to(TUNNEL_PATH, content=substitutes.pop())))
        return answers[-1]

    relay = make_relay(tamper)
    async with server.client(DEVICE, transport=relay) as client:
        with pytest.raises(TunnelRefused):
            await client.post("/count")
        for mangled in mutations(template[0]):
            substitutes.append(mangled)
            with pytest.raises(TunnelRefused) as raised:
                await client.post("/count")
            assert raised.value.status == 400
        assert state.count == 0
        relay.handler = None
        assert (await client.post("/count")).json() == {"count": 1}
    assert len(answers) == len(mutations(template[0]))
    first = answers[0].comparable()
    assert first[0] == 400 and first[2] == b"bad frame\n"
    assert all(answer.comparable() == first for answer in answers)


async def test_a_replayed_request_frame_is_refused_without_a_second_execution(make_relay, server, state):
    relay = make_relay()
    async with server.client(DEVICE, transport=relay) as client:
        assert (await client.post("/count")).json() == {"count": 1}
    replay = await relay.forward(relay.seen[-1])
    assert (replay.status, replay.body) == (400, b"bad frame\n") and state.count == 1


async def test_one_frame_sent_from_64_concurrent_tasks_runs_exactly_once(make_relay, server, state):
    held: list[Outer] = []

    async def hold(outer: Outer, forward) -> Answer:
        if outer.path == TUNNEL_PATH:
            held.append(outer)
            return Answer(503)
        return await forward(outer)

    relay = make_relay(hold)
    async with server.client(DEVICE, transport=relay) as client:
        with pytest.raises(TunnelRefused):
            await client.post("/count")
    statuses: list[int] = []

    async def send() -> None:
        statuses.append((await relay.forward(held[0])).status)

    async with anyio.create_task_group() as group:
        for _ in range(64):
            group.start_soon(send)
    assert sorted(statuses) == [200] + [400] * 63 and state.count == 1


async def test_a_frame_replayed_to_another_route_or_session_is_refused(make_relay, server, state):
    relay = make_relay()
    async with server.client(DEVICE, transport=relay) as client, server.client(DEVICE, transport=relay) as second:
        assert (await client.post("/count")).status_code == 200
        frame = relay.seen[-1]
        await second.get("/echo")
        other_session = [(k, v) for k, v in relay.seen[-1].headers if k == SESSION_HEADER.encode()]
    handshake_refusal = await raw_post(relay, server, HANDSHAKE_PATH, b"")
    to_handshake = await relay.forward(frame.to(HANDSHAKE_PATH))
    to_inner = await relay.forward(frame.to("/count"))
    to_other_session = await relay.forward(frame.to(TUNNEL_PATH, headers=other_session))
    assert to_handshake.comparable() == handshake_refusal.comparable()
    assert to_inner.status == 404
    assert (to_other_session.status, to_other_session.body) == (400, b"bad frame\n")
    assert state.count == 1


async def test_a_request_whose_answer_was_lost_is_not_run_again_when_the_client_retries(make_relay, server, state):
    dropped = []

    async def lose_first_answer(outer: Outer, forward) -> Answer:
        answer = await forward(outer)
        if outer.path == TUNNEL_PATH and not dropped:
            dropped.append(answer)
            return Answer(401, [], b"session unknown or expired\n")  # a relay lying that it was never opened
        return answer

    async with server.client(DEVICE, transport=make_relay(lose_first_answer)) as client:
        with pytest.raises(TunnelRefused) as raised:
            await client.post("/count")
    assert raised.value.status == 400 and state.count == 1 and dropped[0].status == 200
    assert "an earlier attempt of it may have run" in str(raised.value)  # never "not executed": it ran once


async def test_a_request_kept_back_by_the_network_is_refused_after_the_request_id_memory_let_it_go(
    make_relay, state, directory
):
    held: list[Outer] = []

    async def keep_first_frame(outer: Outer, forward) -> Answer:
        if outer.path == TUNNEL_PATH and not held:
            held.append(outer)
            return Answer(401, [], b"session unknown or expired\n")  # a lie: the client sends it again
        return await forward(outer)

    relay = make_relay(keep_first_frame)
    forgetful = SessionTable(time.time, request_id_memory=8)  # the in-memory table's limit (PostgreSQL has none)
    with serve_channel(inner_app(state), directory, sessions=forgetful) as server:
        async with server.client(DEVICE, transport=relay) as client:
            assert (await client.post("/count")).json() == {"count": 1}  # sent again in a new session: run once
            for _ in range(8):  # enough later requests for the server to let the first id go
                await client.get("/echo")
        late = await relay.forward(held[0])  # its first session is still live
    assert (late.status, late.body) == (400, b"bad frame\n") and state.count == 1


# -- a seen session id -------------------------------------------------------------------------------------------
async def test_frames_forged_under_a_seen_session_id_do_not_keep_the_session_alive(make_relay, serve, state, directory):
    clock, relay = Clock(), make_relay()
    server = serve(inner_app(state), directory, clock=clock, clock_window=2 * SESSION_LIFETIME)
    async with server.client(DEVICE, transport=relay) as client:
        assert (await client.post("/count")).status_code == 200
        clock.now += SESSION_IDLE - 1
        forged = await relay.forward(relay.seen[-1].to(TUNNEL_PATH, content=forged_frame()))
        clock.now += 2  # idle for longer than SESSION_IDLE since the device's last request
        assert (await client.post("/count")).status_code == 200
    assert (forged.status, forged.body) == (400, b"bad frame\n")
    assert relay.paths() == [HANDSHAKE_PATH, TUNNEL_PATH, TUNNEL_PATH, HANDSHAKE_PATH, TUNNEL_PATH]  # expired: 401


async def test_frames_forged_under_a_seen_session_id_do_not_spend_the_callers_request_budget(
    make_relay, serve, state, directory
):
    relay = make_relay()
    limits = CallerLimits(rate=Rate(burst=3, per_second=0.001))
    server = serve(inner_app(state), directory, caller_limits=limits)
    async with server.client(DEVICE, transport=relay) as client:
        assert (await client.post("/count")).status_code == 200
        forged = [await relay.forward(relay.seen[-1].to(TUNNEL_PATH, content=forged_frame())) for _ in range(10)]
        assert [answer.status for answer in forged] == [400] * 10
        with anyio.fail_after(WAIT):
            assert (await client.post("/count")).json() == {"count": 2}
    assert relay.paths().count(TUNNEL_PATH) == 2  # no 429 to wait out


async def test_refused_frames_are_logged_one_by_one_only_while_the_failure_budget_lasts(
    make_relay, serve, state, directory, caplog
):
    relay = make_relay()
    server = serve(inner_app(state), directory, failure_rate=Rate(burst=3, per_second=0.001))
    async with server.client(DEVICE, transport=relay) as client:
        assert (await client.post("/count")).status_code == 200
        with caplog.at_level(logging.WARNING, logger="channel.server"):
            for _ in range(20):
                await relay.forward(relay.seen[-1].to(TUNNEL_PATH, content=forged_frame()))
    refusals = [record for record in caplog.records if "tunnel refused" in record.getMessage()]
    assert len(refusals) == 3


# -- response streams --------------------------------------------------------------------------------------------
async def test_a_request_frame_reflected_to_its_sender_is_refused(make_relay, server, state):
    async def reflect(outer: Outer, forward) -> Answer:
        if outer.path == TUNNEL_PATH:
            return Answer(200, [], outer.content)
        return await forward(outer)

    async with server.client(DEVICE, transport=make_relay(reflect)) as client:
        with pytest.raises(FrameError):
            await client.get("/echo")


async def test_two_in_flight_responses_swapped_are_both_refused(make_relay, server):
    arrived: list[tuple[Outer, Answer]] = []
    both = anyio.Event()

    async def swap(outer: Outer, forward) -> Answer:
        if outer.path != TUNNEL_PATH:
            return await forward(outer)
        arrived.append((outer, await forward(outer)))
        if len(arrived) == 2:
            both.set()
        with anyio.fail_after(10):
            await both.wait()
        return next(answer for sent, answer in arrived if sent is not outer)

    refused: list[str] = []
    async with server.client(DEVICE, transport=make_relay(swap)) as client:

        async def one(path: str) -> None:
            with pytest.raises(FrameError):
                await client.get(path)
            refused.append(path)

        async with anyio.create_task_group() as group:
            group.start_soon(one, "/echo/a")
            group.start_soon(one, "/echo/b")
    assert sorted(refused) == ["/echo/a", "/echo/b"]


@pytest.mark.parametrize("cut", ["end", "end-and-body", "mid-frame", "head-only", "nothing", "extended"])
async def test_a_response_stream_cut_before_its_final_frame_or_extended_after_it_is_refused(make_relay, server, cut):
    async def truncate(outer: Outer, forward) -> Answer:
        answer = await forward(outer)
        if outer.path != TUNNEL_PATH:
            return answer
        body = answer.body
        end = 14 + 16
        kept = {
            "end": body[:-end],
            "end-and-body": body[: -end - 1],
            "mid-frame": body[:-1],
            "head-only": body[: len(body) - end - (len(body) - end) // 2],
            "nothing": b"",
            "extended": body + body[-end:],
        }[cut]
        return Answer(answer.status, answer.headers, kept)

    async with server.client(DEVICE, transport=make_relay(truncate)) as client:
        with pytest.raises(FrameError):
            await client.get("/download", params={"size": 1000})


async def test_every_flipped_byte_of_a_response_is_refused(make_relay, server):
    original: list[bytes] = []
    flip_at: list[int] = []

    async def flip(outer: Outer, forward) -> Answer:
        answer = await forward(outer)
        if outer.path != TUNNEL_PATH:
            return answer
        if not flip_at:
            original.append(answer.body)
            return answer
        body = bytearray(answer.body)
        body[flip_at[-1]] ^= 0x01
        return Answer(answer.status, answer.headers, bytes(body))

    async with server.client(DEVICE, transport=make_relay(flip)) as client:
        await client.get("/echo")
        for index in range(len(original[0])):
            flip_at.append(index)
            with pytest.raises(FrameError):
                await client.get("/echo")
