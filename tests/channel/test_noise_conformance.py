"""Our Noise_IK_25519_ChaChaPoly_BLAKE2b is byte-exact with two independent references.

1. The published vectors of noise-c (tests/data/noise_ik_vectors.json, with its provenance inside).
2. The `noiseprotocol` package (PyPI, built on `cryptography`, not on PyNaCl), run live on random keys and
   payloads in both roles: each message one side writes must equal what the other implementation writes, and
   each side must read the other's.
"""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from noise.connection import Keypair, NoiseConnection

from channel.constants import PROTOCOL_NAME
from channel.noise import Initiator, Responder, open_sealed, public_key, seal
from tests.conftest import REPO

VECTORS = json.loads((REPO / "tests" / "data" / "noise_ik_vectors.json").read_text())
KEY = st.binary(min_size=32, max_size=32)
PAYLOAD = st.binary(max_size=200)


def h(name: str) -> bytes:
    return bytes.fromhex(VECTORS[name])


def test_the_vectors_are_the_protocol_we_speak():
    assert VECTORS["protocol_name"].encode() == PROTOCOL_NAME
    assert public_key(h("resp_static")) == h("init_remote_static")


def test_the_published_handshake_and_transport_messages_are_reproduced_byte_for_byte():
    messages = [(bytes.fromhex(m["payload"]), bytes.fromhex(m["ciphertext"])) for m in VECTORS["messages"]]
    initiator = Initiator(
        protocol_name=PROTOCOL_NAME,
        prologue=h("prologue"),
        static_private=h("init_static"),
        remote_static=h("init_remote_static"),
        ephemeral_private=h("init_ephemeral"),
    )
    responder = Responder(protocol_name=PROTOCOL_NAME, prologue=h("prologue"), static_private=h("resp_static"))

    msg1 = initiator.create_msg1(messages[0][0])
    assert msg1 == messages[0][1]
    assert responder.consume_msg1(msg1) == messages[0][0]
    assert responder.remote_static == public_key(h("init_static"))

    msg2, server_keys = responder.create_msg2(messages[1][0], h("resp_ephemeral"))
    assert msg2 == messages[1][1]
    payload, client_keys = initiator.consume_msg2(msg2)
    assert payload == messages[1][0]
    assert client_keys.handshake_hash == server_keys.handshake_hash == h("handshake_hash")
    assert client_keys.initiator_to_responder == server_keys.initiator_to_responder
    assert client_keys.responder_to_initiator == server_keys.responder_to_initiator
    assert client_keys.initiator_to_responder != client_keys.responder_to_initiator

    # Transport messages alternate initiator, responder, each direction with its own key and nonce sequence.
    for index, (plaintext, ciphertext) in enumerate(messages[2:]):
        key = client_keys.initiator_to_responder if index % 2 == 0 else client_keys.responder_to_initiator
        assert seal(key, index // 2, b"", plaintext) == ciphertext
        assert open_sealed(key, index // 2, b"", ciphertext, ValueError) == plaintext


def _reference(initiator: bool, prologue: bytes, static: bytes, ephemeral: bytes, remote: bytes | None):
    connection = NoiseConnection.from_name(PROTOCOL_NAME)
    if initiator:
        connection.set_as_initiator()
    else:
        connection.set_as_responder()
    connection.set_prologue(prologue)
    connection.set_keypair_from_private_bytes(Keypair.STATIC, static)
    connection.set_keypair_from_private_bytes(Keypair.EPHEMERAL, ephemeral)
    if remote is not None:
        connection.set_keypair_from_public_bytes(Keypair.REMOTE_STATIC, remote)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "One of ephemeral keypairs is already set")  # pinned on purpose
        connection.start_handshake()
    return connection


@settings(max_examples=25, deadline=None)
@given(
    client_static=KEY,
    client_ephemeral=KEY,
    server_static=KEY,
    server_ephemeral=KEY,
    prologue=st.binary(max_size=64),
    payload1=PAYLOAD,
    payload2=PAYLOAD,
    transport=PAYLOAD,
)
def test_each_role_matches_the_noiseprotocol_package_byte_for_byte(
    client_static, client_ephemeral, server_static, server_ephemeral, prologue, payload1, payload2, transport
):
    ours_client = Initiator(
        protocol_name=PROTOCOL_NAME,
        prologue=prologue,
        static_private=client_static,
        remote_static=public_key(server_static),
        ephemeral_private=client_ephemeral,
    )
    ours_server = Responder(protocol_name=PROTOCOL_NAME, prologue=prologue, static_private=server_static)
    their_client = _reference(True, prologue, client_static, client_ephemeral, public_key(server_static))
    their_server = _reference(False, prologue, server_static, server_ephemeral, None)

    msg1 = ours_client.create_msg1(payload1)
    assert bytes(their_client.write_message(payload1)) == msg1
    assert bytes(their_server.read_message(msg1)) == payload1
    assert ours_server.consume_msg1(msg1) == payload1

    msg2, server_keys = ours_server.create_msg2(payload2, server_ephemeral)
    assert bytes(their_server.write_message(payload2)) == msg2
    assert bytes(their_client.read_message(msg2)) == payload2
    got, client_keys = ours_client.consume_msg2(msg2)
    assert got == payload2
    assert client_keys.handshake_hash == bytes(their_client.get_handshake_hash())

    # After Split both directions agree with the reference's cipher states (nonce 0, empty associated data).
    assert seal(client_keys.initiator_to_responder, 0, b"", transport) == their_client.encrypt(transport)
    assert seal(server_keys.responder_to_initiator, 0, b"", transport) == their_server.encrypt(transport)


def test_a_different_prologue_makes_the_reference_refuse_our_msg1():
    statics = bytes(range(32)), bytes(range(32, 64))
    ours = Initiator(
        protocol_name=PROTOCOL_NAME,
        prologue=b"agent-memory channel v2",
        static_private=statics[0],
        remote_static=public_key(statics[1]),
        ephemeral_private=bytes(range(64, 96)),
    )
    theirs = _reference(False, b"agent-memory channel v1", statics[1], bytes(range(96, 128)), None)
    with pytest.raises(Exception):  # noqa: B017 - the reference raises its own InvalidTag-like error
        theirs.read_message(ours.create_msg1(b""))
