"""The smaller findings of the probe, each in process against the real service and mirror."""

from __future__ import annotations

import apsw
import pytest

from server.errors import PermissionDeniedError
from server.memory.service import CallerContext, MemoryService
from server.mirror.mirror import Mirror
from server.mirror.state import IdempotencyRecord
from tests.fakes.embedder import HashingEmbedder

WRITER = CallerContext("alice", "SHA256:a", {"proj": "rw"}, "proj", "rw")
READER = CallerContext("reader", "SHA256:r", {"proj": "r"}, "proj", "r")


def test_a_read_only_caller_cannot_force_a_full_reindex(tmp_path):
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        service.write(WRITER, "a note\n", path="memory/a.md", mode="replace", expected_hash="absent")
        assert service.sync(READER).cancelled is False  # changed files only: anyone who may read
        with pytest.raises(PermissionDeniedError):
            service.sync(READER, force=True)
        assert service.sync(WRITER, force=True).files_seen == 1
    finally:
        service.close()


def test_idempotency_keys_are_stored_hashed_and_still_found(tmp_path):
    mirror = Mirror(tmp_path / "idx")
    key = "retry-of-deploy-token-ghp_0123456789abcdefghijklmnopqrstuvwxyz"
    mirror.remember(IdempotencyRecord("alice", key, "request-digest", "{}"))
    assert mirror.recall("alice", key) is not None
    mirror.close()
    db = apsw.Connection(str(tmp_path / "idx" / "state.sqlite3"))
    stored = [row[0] for row in db.execute("SELECT key FROM idempotency")]
    db.close()
    assert len(stored) == 1 and "ghp_" not in str(stored[0]) and str(stored[0]).startswith("sha256:")


def test_idempotency_keys_stored_raw_by_an_older_server_are_hashed_on_upgrade(tmp_path):
    Mirror(tmp_path / "idx").close()
    db = apsw.Connection(str(tmp_path / "idx" / "state.sqlite3"))
    db.execute(
        "INSERT INTO idempotency(caller, key, request, result, created_at) VALUES('alice', 'raw-key', 'r', '{}', ?)",
        ("9999-01-01T00:00:00Z",),
    )
    db.execute("DROP TABLE history; PRAGMA user_version = 2")  # as a server of state version 2 left it
    db.close()
    mirror = Mirror(tmp_path / "idx")
    assert mirror.recall("alice", "raw-key") is not None
    mirror.close()
