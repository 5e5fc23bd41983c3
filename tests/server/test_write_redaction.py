"""`memory_write` redaction on the server: secrets in what an agent writes become typed markers before the text
reaches the mirror, the index or any laptop; `MEMORY_REDACT_WRITES=0` (redact_writes=False) stores text as sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from channel.authz import ChannelUser
from server.errors import SecretsRefusedError
from server.memory.history import HistoryService
from server.memory.service import CallerContext, MemoryService
from server.sync.service import SyncService
from syncproto.messages import PushChange
from tests.fakes.embedder import HashingEmbedder

pytestmark = pytest.mark.usefixtures("backend")  # every test runs on SQLite and on PostgreSQL

ALICE = CallerContext.from_user(ChannelUser("alice", "SHA256:alice", {"team": "rw"}, "team", "rw"))
AWS_KEY = "AKIA" + "J7Q2W4E6R8T1Y3U5"  # built here so no key-shaped literal sits in the repo
TOKEN = "ghp_" + "Zx8Yw7Vu6Ts5" * 3
NOTE = f"Deploy user key is {AWS_KEY}; CI uses {TOKEN}. The commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 stays."


def test_secrets_in_content_and_topic_are_replaced_before_anything_is_stored(tmp_path: Path) -> None:
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        written = service.write(
            ALICE,
            NOTE,
            path="memory/deploy.md",
            topic=f"rotated {TOKEN}",
            idempotency_key="deploy-1",
        )
        assert written.redacted == {"aws-key": 1, "github-token": 2}
        text = service.get(ALICE, "memory/deploy.md").content
        assert AWS_KEY not in text and TOKEN not in text
        assert "[redacted:aws-key]" in text and "rotated [redacted:github-token]" in text
        assert "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39" in text  # a commit hash is not a secret
        assert all(AWS_KEY not in hit.snippet for hit in service.search(ALICE, AWS_KEY).hits)
        again = service.write(
            ALICE,
            NOTE,
            path="memory/deploy.md",
            topic=f"rotated {TOKEN}",
            idempotency_key="deploy-1",
        )
        assert again.replayed and again.redacted == written.redacted and again.hash == written.hash
    finally:
        service.close()


def test_an_operator_may_turn_redaction_off(tmp_path: Path) -> None:
    service = MemoryService(tmp_path / "data", HashingEmbedder(), redact_writes=False)
    try:
        written = service.write(ALICE, f"key {AWS_KEY}", path="memory/raw.md")
        assert written.redacted == {} and AWS_KEY in service.get(ALICE, "memory/raw.md").content
    finally:
        service.close()


def test_a_secret_in_a_written_path_is_refused_without_showing_it(tmp_path: Path) -> None:
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        with pytest.raises(SecretsRefusedError) as refused:
            service.write(ALICE, "the deploy notes", path=f"memory/{TOKEN}.md", idempotency_key="k1")
        assert TOKEN not in str(refused.value) and "memory/[redacted:github-token].md" in str(refused.value)
        with pytest.raises(SecretsRefusedError):
            service.write(ALICE, "we pick sqlite", path=f"memory/aws-{AWS_KEY}.md", heading="Decisions")
        assert service.list(ALICE).files == []
    finally:
        service.close()


def test_a_pushed_file_whose_name_holds_a_secret_is_rejected_and_reaches_no_other_laptop(tmp_path: Path) -> None:
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        sync = SyncService(service)
        _, [result] = sync.push(ALICE, [PushChange(f"memory/aws-{AWS_KEY}.md", None, "harmless text\n")])
        assert result.status == "rejected" and result.message is not None
        assert AWS_KEY not in result.message and "memory/aws-[redacted:aws-key].md" in result.message
        assert service.list(ALICE).files == [] and sync.changes(ALICE, 0).changes == []
    finally:
        service.close()


def test_a_file_named_with_a_secret_before_names_were_checked_is_not_restored(tmp_path: Path) -> None:
    path = f"memory/{TOKEN}.md"
    unchecked = MemoryService(tmp_path / "data", HashingEmbedder(), redact_writes=False)
    try:
        unchecked.write(ALICE, "old notes", path=path)
        unchecked.delete(ALICE, path)  # the operator cleans up; the version stays in the history
        version = HistoryService(unchecked).history(ALICE, path=path).versions[-1].version
    finally:
        unchecked.close()
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        with pytest.raises(SecretsRefusedError) as refused:
            HistoryService(service).restore(ALICE, path, version)
        assert TOKEN not in str(refused.value)
        assert service.list(ALICE).files == []
    finally:
        service.close()


def test_a_secret_in_a_tag_or_category_is_refused_without_showing_it_and_nothing_is_stored(tmp_path: Path) -> None:
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        refusals = [
            {"path": "memory/t.md", "tags": ["deploy", TOKEN]},  # into the front matter
            {"tags": [f"#{TOKEN}"]},  # on a daily log's entry heading
            {"path": "memory/c.md", "category": AWS_KEY},  # a secret as sent, though stored in lower case
            {"path": "memory/h.md", "heading": "Decisions", "tags": [TOKEN.lower()]},
        ]
        for labels in refusals:
            with pytest.raises(SecretsRefusedError) as refused:
                service.write(ALICE, "the deploy notes", **labels)  # type: ignore[arg-type]
            message = str(refused.value)
            assert TOKEN not in message and TOKEN.lower() not in message and AWS_KEY.lower() not in message.lower()
            assert "[redacted:" in message and "Nothing was written" in message
        assert service.list(ALICE).files == []
        written = service.write(ALICE, "the deploy notes", path="memory/t.md", tags=["deploy"], category="fact")
        assert written.redacted == {} and "tags: [deploy]" in service.get(ALICE, "memory/t.md").content
    finally:
        service.close()


def test_a_restored_version_holding_a_secret_comes_back_redacted_and_the_version_is_kept(tmp_path: Path) -> None:
    path = "memory/deploy.md"
    unchecked = MemoryService(tmp_path / "data", HashingEmbedder(), redact_writes=False)
    try:
        unchecked.write(ALICE, NOTE, path=path)  # before redaction was on (or before a rule for it was added)
        current = unchecked.get(ALICE, path).hash
        unchecked.write(ALICE, "rotated, see the vault", path=path, mode="replace", expected_hash=current)
        version = HistoryService(unchecked).history(ALICE, path=path).versions[-1].version
    finally:
        unchecked.close()
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        restored = HistoryService(service).restore(ALICE, path, version)
        text = service.get(ALICE, path).content
        assert AWS_KEY not in text and TOKEN not in text and "[redacted:aws-key]" in text
        assert restored.changed and restored.redacted == {"aws-key": 1, "github-token": 1}
        assert restored.hash == service.get(ALICE, path).hash
        assert all(AWS_KEY not in hit.snippet for hit in service.search(ALICE, "deploy user key").hits)
        assert AWS_KEY in service.get(ALICE, path, version=version).content  # the version itself is kept as it was
        again = HistoryService(service).restore(ALICE, path, version)
        assert again.changed is False and again.version == restored.version
    finally:
        service.close()
