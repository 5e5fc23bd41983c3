"""The channel's handshake messages: what they carry, and that any change to them fails closed."""

from __future__ import annotations

import os

import pytest

from channel.constants import HELLO_LEN, KIND_HELLO, VERSION, WELCOME_LEN
from channel.errors import HandshakeError
from channel.handshake import Welcome, consume_initiation, consume_response, create_initiation, create_response
from channel.keys import PrivateKey
from tests.channel.conftest import LOW_ORDER

CLIENT = PrivateKey(bytes(range(32)))
SERVER = PrivateKey(bytes(range(32, 64)))
WELCOME = Welcome(b"S" * 16, 1_700_003_600_000, 1_700_000_000_000)


def hello(timestamp: int = 1_700_000_000_000_000_000, **options):
    return create_initiation(CLIENT, SERVER.public, timestamp, os.urandom, **options)


def test_msg1_carries_only_the_timestamp_and_the_client_key():
    message, _ = hello(123456789)
    assert len(message) == HELLO_LEN and message[:2] == bytes((VERSION, KIND_HELLO))
    received, _ = consume_initiation(SERVER, message)
    assert received.timestamp == 123456789 and received.client_static == CLIENT.public.x25519


def test_msg2_carries_session_id_expiry_and_server_time_and_both_sides_agree_on_keys():
    message, initiator = hello()
    _, responder = consume_initiation(SERVER, message)
    reply, server_keys = create_response(responder, WELCOME, os.urandom)
    assert len(reply) == WELCOME_LEN
    welcome, client_keys = consume_response(initiator, reply)
    assert welcome == WELCOME
    assert client_keys.initiator_to_responder == server_keys.initiator_to_responder
    assert client_keys.responder_to_initiator == server_keys.responder_to_initiator
    assert client_keys.initiator_to_responder != client_keys.responder_to_initiator  # no key reuse across directions
    assert "S" * 4 not in repr(welcome) and server_keys.initiator_to_responder.hex() not in repr(server_keys)


def _mutations(message: bytes):
    for index in range(len(message)):
        for bit in (0x01, 0x80):
            flipped = bytearray(message)
            flipped[index] ^= bit
            yield bytes(flipped)
    for cut in range(len(message)):
        yield message[:cut]
    yield message + b"\x00"
    yield message + message


def test_every_flipped_truncated_or_extended_msg1_is_refused():
    message, _ = hello()
    for mutated in _mutations(message):
        with pytest.raises(HandshakeError):
            consume_initiation(SERVER, mutated)


def test_every_flipped_truncated_or_extended_msg2_is_refused():
    ephemeral = os.urandom(32)

    def initiator():  # the same client state each time: a consume, even a failed one, spends it
        return create_initiation(CLIENT, SERVER.public, 1, lambda _: ephemeral)

    message, _ = initiator()
    _, responder = consume_initiation(SERVER, message)
    reply, _ = create_response(responder, WELCOME, os.urandom)
    for mutated in _mutations(reply):
        with pytest.raises(HandshakeError):
            consume_response(initiator()[1], mutated)
    assert consume_response(initiator()[1], reply)[0] == WELCOME


@pytest.mark.parametrize("point", LOW_ORDER)
def test_a_low_order_ephemeral_key_in_msg1_is_refused(point):
    message, _ = hello()
    forged = message[:2] + bytes.fromhex(point) + message[34:]
    with pytest.raises(HandshakeError):
        consume_initiation(SERVER, forged)


@pytest.mark.parametrize("point", LOW_ORDER)
def test_a_low_order_ephemeral_key_in_msg2_is_refused(point):
    message, initiator = hello()
    _, responder = consume_initiation(SERVER, message)
    reply, _ = create_response(responder, WELCOME, os.urandom)
    with pytest.raises(HandshakeError):
        consume_response(initiator, reply[:2] + bytes.fromhex(point) + reply[34:])


def test_a_different_prologue_or_version_is_refused():
    message, _ = hello(prologue=b"agent-memory channel v2")
    with pytest.raises(HandshakeError):
        consume_initiation(SERVER, message)
    message, _ = hello()
    with pytest.raises(HandshakeError):
        consume_initiation(SERVER, bytes((VERSION + 1,)) + message[1:])


def test_msg1_for_another_server_key_is_refused():
    message, _ = create_initiation(CLIENT, PrivateKey.generate().public, 1, os.urandom)
    with pytest.raises(HandshakeError):
        consume_initiation(SERVER, message)


def test_msg2_from_a_server_that_does_not_hold_the_pinned_key_is_refused():
    impostor = PrivateKey.generate()
    _, initiator = hello()
    # The impostor cannot read msg1; the best it can do is answer with a msg2 of its own key's handshake.
    other, _ = create_initiation(CLIENT, impostor.public, 1, os.urandom)
    _, impostor_responder = consume_initiation(impostor, other)
    forged, _ = create_response(impostor_responder, WELCOME, os.urandom)
    with pytest.raises(HandshakeError):
        consume_response(initiator, forged)
