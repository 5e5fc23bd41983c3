"""Finding 4: one redaction rule for every way text enters the server. A secret pasted into a synced note never
reaches the mirror, the index, search results or another laptop; the writer's file stays as written, and the
refusal is in the proxy's log and status. memory_write and transcripts (even from a proxy that did not redact)
are stored redacted. Real server, two real `memory-proxy` processes."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from channel.authz import ChannelUser
from server.memory.service import CallerContext, MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.inner_app import inner_clients
from tests.proxy_support import PROXY
from tests.sync_support import Laptop, ProductServer, eventually

pytestmark = pytest.mark.anyio

AWS_KEY = "AKIAZ7QWERTYUIOPASDF"
AWS_SECRET = "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"
NOTE = f"# Deploy\n\nThe staging user:\n\naws_access_key_id = {AWS_KEY}\naws_secret_access_key = {AWS_SECRET}\n"


def secret_free(text: str | None) -> bool:
    return text is None or (AWS_KEY not in text and AWS_SECRET[5:] not in text and "AKIAZ7" not in text)


async def test_a_secret_in_a_synced_note_stays_on_its_laptop_and_is_reported_there(tmp_path):
    server = ProductServer(tmp_path / "server", HashingEmbedder(), {"alice": {"team": "rw"}, "bob": {"team": "rw"}})
    alice = Laptop(tmp_path / "alice", server, "alice", "team")
    bob = Laptop(tmp_path / "bob", server, "bob", "team")
    alice.write("memory/deploy.md", NOTE)
    alice.write("memory/clean.md", "nothing to hide\n")
    server.start()
    try:
        with alice.bare(), bob.bare():
            await eventually(lambda: bob.read("memory/clean.md") is not None, "the clean note reaching bob")
            await eventually(lambda: "deploy.md" in (alice.read_log() or ""), "alice's proxy logging the refusal")
        assert alice.read("memory/deploy.md") == NOTE  # the writer's original, untouched
        assert server.text("team", "memory/deploy.md") is None  # never in the mirror
        assert bob.read("memory/deploy.md") is None
        log = alice.read_log() or ""
        assert "rejected" in log and "secret" in log and secret_free(log)
        status = subprocess.run(
            [str(PROXY), "status", "--project", str(alice.project), "--json"],
            env={**os.environ, **alice.params().env},  # type: ignore[dict-item]
            capture_output=True,
            text=True,
            timeout=30,
        )
        rejected = {item["path"]: item["message"] for item in json.loads(status.stdout)["rejected"]}
        assert "aws" in rejected["memory/deploy.md"] and secret_free(rejected["memory/deploy.md"])
        assert server.service is not None
        caller = CallerContext("bob", "SHA256:b", {"team": "rw"}, "team", "rw")
        hits = server.service.search(caller, f"staging user {AWS_KEY}").hits
        assert all(secret_free(hit.snippet) and hit.path != "memory/deploy.md" for hit in hits)
    finally:
        server.stop()


async def test_memory_write_and_an_unredacted_transcript_are_stored_redacted(tmp_path):
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    user = ChannelUser("alice", "SHA256:a", {"team": "rw"}, "team", "rw")
    caller = CallerContext.from_user(user)
    try:
        written = service.write(caller, NOTE, path="memory/deploy.md", mode="replace", expected_hash="absent")
        assert written.redacted  # the tool result says what was replaced
        transcript = f"# Session demo (2026-11-23)\n\nuser: the key is {AWS_KEY}, AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n"
        body = {"session": "s1", "day": "2026-11-23", "count": 1, "parts": [{"number": 1, "content": transcript}]}
        async with inner_clients(service, user) as clients:  # as an old or altered proxy would send it
            assert (await clients["alice"].post("/sync/sessions", json=body)).status_code == 200
        files = tmp_path / "data" / "indexes" / "team" / "files"
        stored = [p.read_text() for p in files.rglob("*.md")]
        assert len(stored) == 2 and all(secret_free(text) and "[redacted:" in text for text in stored)
        hits = service.search(caller, "the key is", sources=["memory", "sessions"]).hits
        assert hits and all(secret_free(hit.snippet) for hit in hits)
    finally:
        service.close()
