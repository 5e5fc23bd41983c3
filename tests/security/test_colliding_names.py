"""Finding 8: names that are one file on a macOS or Windows laptop (`Case.md` and `case.md`, `MEMORY.md` and
`memory.md`) are never both created: a sync push and memory_write of the second are refused with the name to use.
The proxy side (a server-supplied name colliding with a local file) is in test_malicious_server."""

from __future__ import annotations

import unicodedata

import pytest

from channel.authz import ChannelUser
from server.index.errors import InvalidArgumentError
from server.memory.service import CallerContext, MemoryService
from syncproto.names import find_collision
from tests.fakes.embedder import HashingEmbedder
from tests.inner_app import inner_clients

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

ALICE = ChannelUser("alice", "SHA256:a", {"team": "rw"}, "team", "rw")
PAIRS = [
    ("memory/Case.md", "memory/case.md"),
    ("MEMORY.md", "memory.md"),
    ("memory/Straße.md", "memory/STRASSE.md"),
    ("memory/Notes/a.md", "memory/notes/a.md"),
]


@pytest.mark.parametrize(("first", "second"), PAIRS)
async def test_a_push_of_a_name_colliding_with_a_live_file_is_refused(tmp_path, first, second):
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        async with inner_clients(service, ALICE) as clients:
            body = {"changes": [{"path": first, "base": None, "content": "one\n"}]}
            assert (await clients["alice"].post("/sync/push", json=body)).json()["results"][0]["status"] == "applied"
            body = {"changes": [{"path": second, "base": None, "content": "two\n"}]}
            [result] = (await clients["alice"].post("/sync/push", json=body)).json()["results"]
        assert result["status"] == "rejected" and f"use {first}" in result["message"]
        with pytest.raises(InvalidArgumentError, match="same file as"):
            service.write(CallerContext.from_user(ALICE), "x\n", path=second, mode="replace", expected_hash="absent")
    finally:
        service.close()


def test_nfc_and_nfd_spellings_are_one_name():
    nfc, nfd = unicodedata.normalize("NFC", "memory/Café.md"), unicodedata.normalize("NFD", "memory/café.md")
    assert find_collision(nfd, [nfc]) == nfc
    assert find_collision(nfc, [nfc, "memory/other.md"]) is None
