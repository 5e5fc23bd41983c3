"""Running the inner app for an opened request (`channel.inner`), in process: the error paths end the outer
response whatever happens, and nothing escapes to the ASGI server."""

from __future__ import annotations

import os

import pytest

from channel.asgi import Message, Receive, Scope, Send
from channel.codec import InnerRequest
from channel.constants import INDEX_HEADER
from channel.inner import run_inner
from channel.sealer import ResponseSealer
from channel.session import Session

pytestmark = pytest.mark.anyio

REQUEST = InnerRequest(b"r" * 16, "GET", b"/", [(INDEX_HEADER.encode(), b"private")], b"")


def ended_session() -> Session:
    return Session(
        id=os.urandom(16),
        caller="alice",
        static_key=b"K" * 32,
        receive_key=os.urandom(32),
        send_key=os.urandom(32),
        created=0.0,
        expires_at=3600.0,
        last_used=0.0,
    )


async def never_called(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the inner app ran")


async def disconnect() -> Message:
    return {"type": "http.disconnect"}


async def test_an_index_refusal_for_a_caller_revoked_meanwhile_cuts_the_stream_instead_of_raising():
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    revoked = lambda: False  # noqa: E731 - the key went away between opening the frame and answering
    sealer = ResponseSealer(send, ended_session(), 0, revoked)
    error = await run_inner(never_called, {"type": "http"}, disconnect, REQUEST, None, sealer, revoked)
    assert error == "revoked"
    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}  # no sealed frame at all
