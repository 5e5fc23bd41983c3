"""The memory service: each tool's behaviour for an authorised caller, confined to the caller's own index."""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from channel.authz import ChannelUser
from server.errors import ConflictError, PermissionDeniedError, ServiceClosedError, UnsafePathError
from server.index.embeddings.base import InputKind, Vectors
from server.index.engine_settings import EngineSettings
from server.index.errors import InvalidArgumentError
from server.index.scan import ScanConfig
from server.indexes.registry import AUTO_INDEX_FILES
from server.memory.service import MAX_GET_CHARS, MAX_WRITE_BYTES, CallerContext, MemoryService
from server.mirror.mirror import DISK
from tests.fakes.embedder import HashingEmbedder
from tests.postgres_support import ON_SERVER_DISK

pytestmark = pytest.mark.usefixtures("backend")  # every test runs on SQLite and on PostgreSQL


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2024, 5, 1, 22, 30, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def caller(name: str, index: str, access: str = "rw", **others: str) -> CallerContext:
    return CallerContext(name, f"SHA256:{name}", {index: access, **others}, index, access)  # type: ignore[arg-type]


ALICE = caller("alice", "proj")
READER = caller("reader", "proj", "r")
BOB = caller("bob", "other")
CAROL = caller("carol", "proj", other="r")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def service(tmp_path: Path, clock: Clock, embedder: HashingEmbedder) -> Iterator[MemoryService]:
    svc = MemoryService(tmp_path / "data", embedder, clock=clock, rescan_interval=0.0)
    yield svc
    svc.close()


def files_dir(service: MemoryService, index: str) -> Path:
    return service.data_dir / "indexes" / index / "files"


# callers and indexes -----------------------------------------------------------------------------------


def test_caller_context_comes_from_the_channel_user() -> None:
    user = ChannelUser("alice", "SHA256:k", {"proj": "rw", "other": "r"}, index="other", access="r")
    context = CallerContext.from_user(user)
    assert (context.name, context.index, context.access, dict(context.grants)) == (
        "alice",
        "other",
        "r",
        {"proj": "rw", "other": "r"},
    )
    with pytest.raises(PermissionDeniedError, match="no index"):
        CallerContext.from_user(ChannelUser("alice", "SHA256:k", {"proj": "rw"}))


def test_an_index_the_caller_was_not_granted_is_refused_everywhere(service: MemoryService) -> None:
    intruder = CallerContext("eve", "SHA256:e", {"other": "rw"}, "proj", "rw")
    calls = [
        lambda: service.search(intruder, "x"),
        lambda: service.get(intruder, "MEMORY.md"),
        lambda: service.write(intruder, "x"),
        lambda: service.list(intruder),
        lambda: service.delete(intruder, "MEMORY.md"),
        lambda: service.status(intruder),
        lambda: service.sync(intruder),
        lambda: service.resource_paths(intruder),
    ]
    for call in calls:
        with pytest.raises(PermissionDeniedError, match="no access to index proj"):
            call()
    assert not (service.data_dir / "indexes" / "proj").exists()


def test_a_read_only_caller_reads_but_cannot_write_or_delete(service: MemoryService) -> None:
    service.write(ALICE, "shared knowledge about kafka", path="MEMORY.md")
    with pytest.raises(PermissionDeniedError, match="only read"):
        service.write(READER, "mine now", path="MEMORY.md", mode="replace", expected_hash="absent")
    with pytest.raises(PermissionDeniedError, match="only read"):
        service.delete(READER, "MEMORY.md")
    assert service.get(READER, "MEMORY.md").content == "shared knowledge about kafka"
    assert [h.path for h in service.search(READER, "kafka").hits] == ["MEMORY.md"]
    assert service.status(READER).access == "r"


def test_an_rw_grant_with_a_read_only_request_is_read_only(service: MemoryService) -> None:
    narrowed = CallerContext("alice", "SHA256:a", {"proj": "rw"}, "proj", "r")
    with pytest.raises(PermissionDeniedError):
        service.write(narrowed, "x")


def test_two_callers_on_different_indexes_cannot_reach_each_other(service: MemoryService) -> None:
    service.write(ALICE, "the launch code is zebra-42", path="memory/secret.md")
    assert service.search(BOB, "launch code zebra").hits == []
    assert service.get(BOB, "memory/secret.md").exists is False
    assert service.list(BOB).files == []
    assert service.delete(BOB, "memory/secret.md").deleted is False
    for sneaky in ("../proj/files/memory/secret.md", "../../indexes/proj/files/MEMORY.md", "/etc/passwd"):
        with pytest.raises(InvalidArgumentError):
            service.get(BOB, sneaky)
        with pytest.raises(InvalidArgumentError):
            service.write(BOB, "x", path=sneaky)
    assert service.get(ALICE, "memory/secret.md").content == "the launch code is zebra-42"


def test_search_all_covers_the_callers_other_indexes_and_labels_hits(service: MemoryService) -> None:
    service.write(ALICE, "kubernetes cluster upgrade notes", path="memory/k8s.md")
    service.write(BOB, "kubernetes ingress controller notes", path="memory/ingress.md")
    only_own = service.search(CAROL, "kubernetes notes")
    assert {h.index for h in only_own.hits} == {"proj"}
    everywhere = service.search(CAROL, "kubernetes notes", scope="all")
    assert everywhere.indexes == ["proj", "other"]
    assert {(h.index, h.path) for h in everywhere.hits} == {("proj", "memory/k8s.md"), ("other", "memory/ingress.md")}
    assert [h.score for h in everywhere.hits] == sorted((h.score for h in everywhere.hits), reverse=True)
    # alice holds no grant on "other": scope=all stays within her grants
    assert {h.index for h in service.search(ALICE, "kubernetes notes", scope="all").hits} == {"proj"}


# write ---------------------------------------------------------------------------------------------------


def test_append_starts_the_daily_log_in_the_callers_timezone(service: MemoryService, clock: Clock) -> None:
    first = service.write(ALICE, "Chose PostgreSQL for billing.", topic="database", timezone="Europe/Paris")
    assert first.path == "memory/2024-05-02.md"  # 22:30 UTC is 00:30 the next day in Paris
    clock.now += dt.timedelta(minutes=15)
    second = service.write(
        ALICE, "\n\nAdded an index on invoices.\n\n", topic="  multi\nline   topic ", timezone="Europe/Paris"
    )
    text = service.get(ALICE, "memory/2024-05-02.md").content
    assert text == (
        "# 2024-05-02\n"
        "\n"
        "## 00:30 — database\n"
        "\n"
        "Chose PostgreSQL for billing.\n"
        "\n"
        "## 00:45 — multi line topic\n"
        "\n"
        "Added an index on invoices."
    )
    assert (first.start_line, first.end_line) == (3, 5)
    assert (second.start_line, second.end_line, second.lines) == (7, 9, 9)
    assert first.indexed and second.indexed and not first.replayed


def test_append_defaults_to_utc_and_a_time_heading_without_topic(service: MemoryService) -> None:
    out = service.write(ALICE, "note without topic")
    assert out.path == "memory/2024-05-01.md"
    assert service.get(ALICE, out.path).content == "# 2024-05-01\n\n## 22:30\n\nnote without topic"


def test_append_to_a_named_file_adds_a_heading_only_with_a_topic(service: MemoryService) -> None:
    service.write(ALICE, "# Project\n\nFacts.", path="MEMORY.md")
    service.write(ALICE, "More facts.", path="MEMORY.md")
    service.write(ALICE, "Even more.", path="MEMORY.md", topic="later")
    assert service.get(ALICE, "MEMORY.md").content == (
        "# Project\n\nFacts.\n\nMore facts.\n\n## 22:30 — later\n\nEven more."
    )


def test_saves_of_one_topic_in_one_minute_get_headings_each_read_and_replaced_on_its_own(
    service: MemoryService,
) -> None:
    for note in ("first", "second", "third"):
        service.write(ALICE, f"{note} deploy note", topic="deploy")
    service.write(ALICE, "labelled", topic="deploy", tags=["ops"])
    service.write(ALICE, "other case", topic="Deploy")  # its own heading already: names match exactly first
    service.write(ALICE, "untitled one")
    service.write(ALICE, "untitled two")
    path = "memory/2024-05-01.md"
    assert [line for line in service.get(ALICE, path).content.split("\n") if line.startswith("#")] == [
        "# 2024-05-01",
        "## 22:30 — deploy",
        "## 22:30 — deploy (2)",
        "## 22:30 — deploy (3)",
        "## 22:30 — deploy (4) [tags: ops]",
        "## 22:30 — Deploy",
        "## 22:30",
        "## 22:30 (2)",
    ]
    second = service.get(ALICE, path, heading="22:30 — deploy (2)")
    assert second.content == "## 22:30 — deploy (2)\n\nsecond deploy note"
    assert second.heading == "2024-05-01 > 22:30 — deploy (2)"
    assert service.get(ALICE, path, heading="22:30 — deploy").content == "## 22:30 — deploy\n\nfirst deploy note"
    assert service.get(ALICE, path, heading="22:30 (2)").content == "## 22:30 (2)\n\nuntitled two"
    assert service.get(ALICE, path, heading="22:30 — deploy (4)").content.endswith("labelled")
    assert service.get(ALICE, path, heading="22:30 — Deploy").content.endswith("other case")
    service.write(
        ALICE, "second, corrected", path=path, mode="replace", heading="22:30 — deploy (2)",
        expected_hash=second.section_hash,
    )  # fmt: skip
    corrected = service.get(ALICE, path, heading="22:30 — deploy (2)")
    assert corrected.content == "## 22:30 — deploy (2)\n\nsecond, corrected"


def test_entries_under_one_heading_in_one_minute_get_headings_each_read_on_its_own(service: MemoryService) -> None:
    for note in ("one", "two"):
        service.write(ALICE, note, heading="Deploy", topic="canary")
    path = "memory/2024-05-01.md"
    assert service.get(ALICE, path, heading="Deploy > 22:30 — canary").content == "### 22:30 — canary\n\none"
    assert service.get(ALICE, path, heading="22:30 — canary (2)").content == "### 22:30 — canary (2)\n\ntwo"


def test_repeated_headings_of_the_users_own_are_kept_and_each_is_read_by_a_line_inside_it(
    service: MemoryService,
) -> None:
    text = "# Log\n\n## 09:30 — deploy\n\nfirst\n\n## 09:30 — deploy\n\nsecond\n\n## 22:30 — deploy\n\nmine\n"
    service.write(ALICE, text, path="memory/2024-04-30.md", mode="replace", expected_hash="absent")
    service.write(ALICE, "a save", path="memory/2024-04-30.md", topic="deploy")
    saved = "## 22:30 — deploy (2)\n\na save"
    assert service.get(ALICE, "memory/2024-04-30.md").content == text + "\n" + saved  # nothing of the user's renamed
    assert service.get(ALICE, "memory/2024-04-30.md", heading="22:30 — deploy (2)").content == saved
    with pytest.raises(
        InvalidArgumentError, match=r"memory_get reads one with heading and start_line, e\.g\. start_line=7"
    ):
        service.get(ALICE, "memory/2024-04-30.md", heading="09:30 — deploy")
    second = service.get(ALICE, "memory/2024-04-30.md", heading="09:30 — deploy", start_line=9)
    assert (second.content, second.start_line) == ("second", 9)
    whole = service.get(ALICE, "memory/2024-04-30.md", heading="09:30 — deploy", start_line=7)
    assert (whole.content, whole.start_line, whole.end_line) == ("## 09:30 — deploy\n\nsecond", 7, 9)
    first = service.get(ALICE, "memory/2024-04-30.md", heading="Log > 09:30 — deploy", start_line=3)
    assert first.content == "## 09:30 — deploy\n\nfirst" and first.section_hash != whole.section_hash


def test_long_topics_are_capped_to_one_line(service: MemoryService) -> None:
    out = service.write(ALICE, "x", topic="word " * 100)
    heading = service.get(ALICE, out.path, start_line=3, end_line=3).content
    assert heading.startswith("## 22:30 — word word") and heading.endswith("…") and len(heading) < 140


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "/usr/share/zoneinfo/UTC", "x" * 100, "Europe/"])
def test_an_unknown_timezone_is_refused(service: MemoryService, zone: str) -> None:
    with pytest.raises(InvalidArgumentError, match="timezone"):
        service.write(ALICE, "x", timezone=zone)


def test_replace_needs_the_current_hash_and_a_stale_one_changes_nothing(service: MemoryService) -> None:
    with pytest.raises(InvalidArgumentError, match="expected_hash"):
        service.write(ALICE, "v1", path="memory/plan.md", mode="replace")
    with pytest.raises(InvalidArgumentError, match="needs a path"):
        service.write(ALICE, "v1", mode="replace", expected_hash="absent")
    created = service.write(ALICE, "v1", path="memory/plan.md", mode="replace", expected_hash="absent")
    assert (created.mode, created.start_line, created.end_line, created.lines) == ("replace", 1, 1, 1)
    with pytest.raises(ConflictError, match="already exists"):
        service.write(ALICE, "v1 again", path="memory/plan.md", mode="replace", expected_hash="ABSENT")
    second = service.write(ALICE, "v2\nmore", path="memory/plan.md", mode="replace", expected_hash=created.hash)
    with pytest.raises(ConflictError) as caught:
        service.write(ALICE, "v3 from a stale view", path="memory/plan.md", mode="replace", expected_hash=created.hash)
    assert second.hash in str(caught.value)
    assert "v3" not in str(caught.value)
    got = service.get(ALICE, "memory/plan.md")
    assert (got.content, got.hash) == ("v2\nmore", second.hash)
    assert service.search(ALICE, "stale view").hits == []


def test_append_with_a_stale_expected_hash_is_refused(service: MemoryService) -> None:
    service.write(ALICE, "first", path="memory/a.md")
    with pytest.raises(ConflictError):
        service.write(ALICE, "second", path="memory/a.md", expected_hash="0" * 64)
    assert service.get(ALICE, "memory/a.md").content == "first"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": ""}, "content is empty"),
        ({"content": " \n\t "}, "content is empty"),
        ({"content": "a\x00b"}, "NUL"),
        ({"content": "a\ud800"}, "Unicode"),
        ({"content": "x" * (MAX_WRITE_BYTES + 1)}, "KiB"),
        ({"content": 42}, "must be a string"),
        ({"content": "x", "mode": "prepend"}, "mode"),
        ({"content": "x", "expected_hash": "abc"}, "sha256"),
        ({"content": "x", "idempotency_key": "k" * 129}, "idempotency_key"),
        ({"content": "x", "idempotency_key": "bad\nkey"}, "idempotency_key"),
        ({"content": "x", "idempotency_key": ""}, "idempotency_key"),
        ({"content": "x", "path": "notes.txt"}, "memory file"),
        ({"content": "x", "topic": 3}, "topic"),
        ({"content": "x", "topic": "deploy \ud800"}, "topic is not valid Unicode"),
        ({"content": "x", "path": "memory/a.md", "topic": "a\x00b"}, "topic must not contain NUL"),
    ],
)
def test_bad_write_arguments_are_clear_errors(service: MemoryService, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        service.write(ALICE, **kwargs)  # type: ignore[arg-type]
    assert service.list(ALICE).total == 0


def test_a_file_may_not_grow_past_the_size_cap(tmp_path: Path, clock: Clock) -> None:
    settings = EngineSettings(scan=ScanConfig(max_file_bytes=1000))
    svc = MemoryService(tmp_path / "data", HashingEmbedder(), settings, clock=clock)
    try:
        svc.write(ALICE, "x" * 600, path="memory/a.md")
        with pytest.raises(InvalidArgumentError, match="larger than 1000 bytes"):
            svc.write(ALICE, "y" * 600, path="memory/a.md")
        assert svc.get(ALICE, "memory/a.md").content == "x" * 600
    finally:
        svc.close()


def test_an_idempotent_retry_writes_once_and_returns_the_first_answer(service: MemoryService) -> None:
    first = service.write(ALICE, "deploy on fridays is banned", idempotency_key="req-1")
    again = service.write(ALICE, "deploy on fridays is banned", idempotency_key="req-1")
    assert again.replayed and not first.replayed
    assert again.model_dump(exclude={"replayed"}) == first.model_dump(exclude={"replayed"})
    assert service.get(ALICE, first.path).content.count("deploy on fridays") == 1
    with pytest.raises(InvalidArgumentError, match="different write"):
        service.write(ALICE, "something else", idempotency_key="req-1")
    # keys belong to a caller: another caller's same key is a new write
    other = caller("dave", "proj")
    assert not service.write(other, "deploy on fridays is banned", idempotency_key="req-1").replayed
    assert service.get(ALICE, first.path).content.count("deploy on fridays") == 2


def test_a_retried_replace_is_not_a_conflict(service: MemoryService) -> None:
    kwargs = {"path": "memory/x.md", "mode": "replace", "expected_hash": "absent", "idempotency_key": "r"}
    service.write(ALICE, "content", **kwargs)  # type: ignore[arg-type]
    assert service.write(ALICE, "content", **kwargs).replayed  # type: ignore[arg-type]


def test_a_written_text_is_searchable_when_write_returns(service: MemoryService) -> None:
    out = service.write(ALICE, "The flaky test was caused by a timezone bug in cron parsing.", topic="flaky test")
    assert out.indexed
    found = service.search(ALICE, "cron timezone bug")
    assert found.hits and found.hits[0].path == out.path
    hit = found.hits[0]
    assert (hit.index, hit.updated_by, hit.updated_at, hit.source) == (
        "proj",
        "alice",
        "2024-05-01T22:30:00Z",
        "memory",
    )
    assert hit.citation == f"{out.path}#L{hit.start_line}-L{hit.end_line}"
    assert found.search_mode == "hybrid" and found.pending_files == 0 and found.indexes == ["proj"]


def test_concurrent_appends_all_land(service: MemoryService) -> None:
    errors: list[BaseException] = []

    def append(n: int) -> None:
        try:
            service.write(ALICE, f"entry number {n}", path="memory/log.md")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    text = service.get(ALICE, "memory/log.md").content
    assert sorted(int(line.split()[-1]) for line in text.split("\n") if line) == list(range(12))


# get -----------------------------------------------------------------------------------------------------


def test_get_of_a_missing_file_is_an_empty_answer(service: MemoryService) -> None:
    got = service.get(ALICE, "memory/nothing.md")
    assert (got.exists, got.content, got.hash, got.total_lines, got.truncated) == (False, "", None, 0, False)


def test_get_of_a_deleted_file_says_who_deleted_it(service: MemoryService) -> None:
    service.write(ALICE, "temp", path="memory/t.md")
    service.delete(ALICE, "memory/t.md")
    got = service.get(ALICE, "memory/t.md")
    assert (got.exists, got.updated_by) == (False, "alice")


def test_get_returns_line_ranges(service: MemoryService) -> None:
    service.write(ALICE, "\n".join(f"line {n}" for n in range(1, 11)), path="memory/lines.md")
    got = service.get(ALICE, "memory/lines.md", start_line=3, end_line=5)
    assert (got.content, got.start_line, got.end_line, got.total_lines, got.truncated) == (
        "line 3\nline 4\nline 5",
        3,
        5,
        10,
        False,
    )
    tail = service.get(ALICE, "memory/lines.md", start_line=9, end_line=50)
    assert (tail.content, tail.end_line) == ("line 9\nline 10", 10)
    past = service.get(ALICE, "memory/lines.md", start_line=11)
    assert (past.content, past.exists, past.start_line) == ("", True, 0)


def test_get_pages_a_large_file_under_the_cap(service: MemoryService) -> None:
    line = "z" * 99
    service.write(ALICE, "\n".join(f"{n:05d}{line}" for n in range(1000)), path="memory/big.md")
    pieces: list[str] = []
    start: int | None = 1
    pages = 0
    while start is not None:
        got = service.get(ALICE, "memory/big.md", start_line=start)
        assert len(got.content) <= MAX_GET_CHARS
        pieces.append(got.content)
        assert got.truncated == (got.next_start_line is not None)
        start = got.next_start_line
        pages += 1
    assert pages == 3
    assert "\n".join(pieces).split("\n") == [f"{n:05d}{line}" for n in range(1000)]


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [(0, None, "start_line"), (None, 0, "end_line"), (5, 2, "after"), (True, None, "start_line"), ("1", None, "start")],
)
def test_bad_line_ranges_are_refused(service: MemoryService, start: object, end: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        service.get(ALICE, "MEMORY.md", start_line=start, end_line=end)  # type: ignore[arg-type]


# One line of 100,000 code points: ASCII, a two-byte, a three-byte and a four-byte character (a surrogate pair in
# UTF-16, as JSON escapes it), so a cut on the wrong unit would show.
LONG_LINE = ("abcdefgh,é€😀" * 9_091)[:100_000]


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_line_longer_than_an_answer_is_read_to_its_end_from_the_character_each_answer_names(
    service: MemoryService, eol: str
) -> None:
    body = eol.join(["# Log", LONG_LINE, "after", ""])
    service.write(ALICE, body, path="memory/blob.md", mode="replace", expected_hash="absent")
    got = service.get(ALICE, "memory/blob.md", start_line=2)
    assert (got.start_line, got.end_line, got.truncated, got.next_start_line) == (2, 2, True, 3)
    pieces = [got.content]
    while got.next_start_char is not None:
        assert got.end_line == 2 and len(got.content) <= MAX_GET_CHARS
        got = service.get(ALICE, "memory/blob.md", start_line=got.end_line, start_char=got.next_start_char)
        pieces.append(got.content)
    assert [len(piece) for piece in pieces] == [MAX_GET_CHARS, MAX_GET_CHARS, 20_000 + len("\nafter")]
    assert "".join(pieces) == LONG_LINE + "\nafter"
    assert (got.start_line, got.end_line, got.truncated, got.next_start_line) == (2, 3, False, None)
    assert not any("\r" in piece for piece in pieces)


def test_a_section_with_a_long_line_is_read_to_its_end_by_following_each_answer(service: MemoryService) -> None:
    service.write(ALICE, f"# Notes\n\n## Blob\n{LONG_LINE}\n\n## Later\nx\n", path="MEMORY.md")
    got = service.get(ALICE, "MEMORY.md", heading="Blob")
    read, answers = got.content, 1
    while got.truncated:  # what an agent does: the rest of a cut line, else the next line
        if got.next_start_char is not None:
            end, char = got.end_line, got.next_start_char
            got = service.get(ALICE, "MEMORY.md", heading="Blob", start_line=end, start_char=char)
            read += got.content
        else:
            assert got.next_start_line is not None
            got = service.get(ALICE, "MEMORY.md", heading="Blob", start_line=got.next_start_line)
            read += "\n" + got.content
        assert got.heading == "Notes > Blob" and got.end_line == 4
        answers += 1
    assert read == f"## Blob\n{LONG_LINE}" and answers == 4


@pytest.mark.parametrize(
    ("start", "char", "message"),
    [
        (2, 0, "start_char must be a whole number from 1"),
        (2, -5, "start_char must be a whole number from 1"),
        (2, True, "start_char must be a whole number from 1"),
        (2, "40001", "start_char must be a whole number from 1"),
        (2, 2.0, "start_char must be a whole number from 1"),
        (None, 40_001, "start_char needs start_line"),
        (1, 7, "start_char 7 is past the end of line 1, which has 5 characters"),
        (2, 2**80, "start_char 1208925819614629174706176 is past the end of line 2, which has 4 characters"),
    ],
)
def test_bad_character_offsets_are_refused(service: MemoryService, start: object, char: object, message: str) -> None:
    service.write(ALICE, "# Log\ntext\n", path="memory/blob.md", mode="replace", expected_hash="absent")
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        service.get(ALICE, "memory/blob.md", start_line=start, start_char=char)  # type: ignore[arg-type]


def test_a_character_offset_in_a_line_before_the_section_read_is_refused(service: MemoryService) -> None:
    service.write(ALICE, "# Notes\n\n## Blob\ntext\n", path="MEMORY.md")
    with pytest.raises(InvalidArgumentError, match="start_char counts in start_line 1, which is before section"):
        service.get(ALICE, "MEMORY.md", heading="Blob", start_line=1, start_char=3)


# list, delete, resources ------------------------------------------------------------------------------


def test_list_pages_with_a_cursor_and_filters(service: MemoryService) -> None:
    for day in range(1, 8):
        service.write(ALICE, f"day {day}", path=f"memory/2024-05-0{day}.md")
    service.write(ALICE, "top", path="MEMORY.md")
    first = service.list(ALICE, limit=3)
    assert [f.path for f in first.files] == ["MEMORY.md", "memory/2024-05-01.md", "memory/2024-05-02.md"]
    assert first.total == 8 and first.next_cursor
    entry = first.files[0]
    assert (entry.size, entry.lines, entry.updated_by, len(entry.hash)) == (4, 1, "alice", 64)  # "top\n"
    seen = [f.path for f in first.files]
    cursor = first.next_cursor
    while cursor:
        page = service.list(ALICE, limit=3, cursor=cursor)
        seen += [f.path for f in page.files]
        cursor = page.next_cursor
    assert seen == ["MEMORY.md"] + [f"memory/2024-05-0{d}.md" for d in range(1, 8)]
    ranged = service.list(ALICE, date_from="2024-05-03", date_to="2024-05-04")
    assert [f.path for f in ranged.files] == ["memory/2024-05-03.md", "memory/2024-05-04.md"]
    assert service.list(ALICE, prefix="MEM").total == 1
    assert service.resource_paths(ALICE) == seen


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "YWZ0ZXI6Li4vZXRjL3Bhc3N3ZA"}, "cursor"),  # "after:../etc/passwd"
        ({"limit": 0}, "limit"),
        ({"limit": 5000}, "limit"),
        ({"date_from": "2024-13-01"}, "date_from"),
        ({"date_from": "2024-05-02", "date_to": "2024-05-01"}, "after"),
        ({"prefix": "../"}, "prefix"),
    ],
)
def test_bad_list_arguments_are_refused(service: MemoryService, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        service.list(ALICE, **kwargs)  # type: ignore[arg-type]


def test_delete_removes_the_file_from_search_at_once(service: MemoryService) -> None:
    out = service.write(ALICE, "obsolete runbook for the mainframe", path="memory/runbook.md")
    with pytest.raises(ConflictError):
        service.delete(ALICE, "memory/runbook.md", expected_hash="f" * 64)
    deleted = service.delete(ALICE, "memory/runbook.md", expected_hash=out.hash)
    assert (deleted.deleted, deleted.previous_hash) == (True, out.hash)
    assert service.search(ALICE, "mainframe runbook").hits == []
    assert service.delete(ALICE, "memory/runbook.md").deleted is False
    with pytest.raises(InvalidArgumentError):
        service.delete(ALICE, "memory/../MEMORY.md")


# the mirror on disk --------------------------------------------------------------------------------------


@ON_SERVER_DISK
def test_a_file_edited_on_disk_is_picked_up(service: MemoryService) -> None:
    service.write(ALICE, "original wording", path="memory/notes.md")
    target = files_dir(service, "proj") / "memory" / "notes.md"
    target.write_text("the operator rewrote this about quantum tunnelling\n")
    (files_dir(service, "proj") / "MEMORY.md").write_text("dropped in by hand: espresso machine\n")
    found = service.search(ALICE, "quantum tunnelling")
    assert [h.path for h in found.hits] == ["memory/notes.md"]
    assert found.hits[0].updated_by == DISK and found.pending_files == 0
    assert service.search(ALICE, "espresso").hits[0].path == "MEMORY.md"
    assert service.get(ALICE, "memory/notes.md").updated_by == DISK
    target.unlink()
    assert service.search(ALICE, "quantum tunnelling").hits == []


def _keyword_paths(service: MemoryService, query: str) -> list[str]:
    return [h.path for h in service.search(ALICE, query).hits if h.matched_by != "vector"]


def _rewrite_keeping_size_and_mtime(target: Path, text: str) -> None:
    """An edit `cp -p`, `rsync -t` or one within a timestamp tick leaves: the same size and mtime, other bytes."""
    before = target.stat()
    assert len(text.encode()) == before.st_size
    target.write_text(text)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.sqlite_only("the SQLite index's size-and-mtime shortcut")
def test_an_edit_on_disk_keeping_size_and_mtime_is_indexed_by_memory_sync(service: MemoryService) -> None:
    service.write(ALICE, "# n\n\nalphaold betaold\n", path="memory/n.md")
    _rewrite_keeping_size_and_mtime(files_dir(service, "proj") / "memory" / "n.md", "# n\n\nalphanew betanew\n")
    assert "alphanew" in service.get(ALICE, "memory/n.md").content  # the mirror knows the new hash: pending
    out = service.sync(ALICE)
    assert out.files_indexed == 1
    assert _keyword_paths(service, "alphanew") == ["memory/n.md"] and _keyword_paths(service, "alphaold") == []
    assert service.status(ALICE).pending_files == 0


@pytest.mark.sqlite_only("the SQLite index's size-and-mtime shortcut")
def test_an_edit_on_disk_keeping_size_and_mtime_is_indexed_by_the_next_search(service: MemoryService) -> None:
    service.write(ALICE, "# n\n\nalphaold betaold\n", path="memory/n.md")
    _rewrite_keeping_size_and_mtime(files_dir(service, "proj") / "memory" / "n.md", "# n\n\nalphanew betanew\n")
    service.get(ALICE, "memory/n.md")
    assert _keyword_paths(service, "alphanew") == ["memory/n.md"]
    assert service.status(ALICE).pending_files == 0


@ON_SERVER_DISK
def test_files_on_disk_under_names_the_mirror_refuses_are_neither_indexed_nor_pending(service: MemoryService) -> None:
    service.write(ALICE, "plain words", path="memory/ok.md")
    for name in ("memory/a:b.md", "memory/.draft.md", "memory/CON.md", "sessions/laptop/notes.md"):
        target = files_dir(service, "proj") / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("# refused\n\nzzrefusedmarker text\n")
    assert _keyword_paths(service, "zzrefusedmarker") == []
    service.sync(ALICE)
    assert _keyword_paths(service, "zzrefusedmarker") == []
    assert service.status(ALICE).pending_files == 0 and service.search(ALICE, "plain").notice is None


@ON_SERVER_DISK
def test_a_file_turned_unreadable_on_disk_is_not_found_by_its_old_text_and_is_listed_as_unreadable(
    service: MemoryService,
) -> None:
    service.write(ALICE, "# bad\n\nzzoldwords text\n", path="memory/bad.md")
    service.write(ALICE, "# big\n\nzzoldbig text\n", path="memory/big.md")
    folder = files_dir(service, "proj") / "memory"
    (folder / "bad.md").write_bytes(b"# bad\n\nzznewwords \xff\xfe text\n")
    (folder / "big.md").write_text("# big\n\n" + "x" * (service.indexes.get("proj").mirror.max_file_bytes + 10))
    service.sync(ALICE)
    assert _keyword_paths(service, "zzoldwords") == [] and _keyword_paths(service, "zzoldbig") == []
    status = service.status(ALICE)
    assert set(status.unreadable) == {"memory/bad.md", "memory/big.md"} and status.pending_files == 0
    assert "UTF-8" in status.unreadable["memory/bad.md"] and "larger" in status.unreadable["memory/big.md"]
    (folder / "bad.md").write_text("# bad\n\nzzfixedwords text\n")
    assert _keyword_paths(service, "zzfixedwords") == ["memory/bad.md"]
    assert set(service.status(ALICE).unreadable) == {"memory/big.md"}


@ON_SERVER_DISK
@pytest.mark.parametrize("replacement", ["folder", "symlink"])
def test_a_file_replaced_on_disk_by_a_folder_or_a_link_leaves_the_index_and_is_not_pending(
    service: MemoryService, replacement: str
) -> None:
    service.write(ALICE, "# a\n\nzzalphaword\n", path="memory/a.md")
    target = files_dir(service, "proj") / "memory" / "a.md"
    target.unlink()
    if replacement == "folder":
        target.mkdir()
    else:
        (files_dir(service, "proj") / "outside.md").write_text("x\n")
        target.symlink_to(files_dir(service, "proj") / "outside.md")
    found = service.search(ALICE, "zzalphaword")
    assert [h.path for h in found.hits] == [] and found.pending_files == 0 and found.notice is None
    service.sync(ALICE)
    status = service.status(ALICE)
    assert status.pending_files == 0 and set(status.unreadable) == {"memory/a.md"}


@ON_SERVER_DISK
def test_search_looks_for_disk_changes_at_most_once_per_interval(tmp_path: Path, clock: Clock) -> None:
    svc = MemoryService(tmp_path / "data", HashingEmbedder(), clock=clock, rescan_interval=3600)
    try:
        svc.write(ALICE, "first draft about gardening", path="memory/n.md")
        assert svc.search(ALICE, "gardening").hits  # looks at the disk: the write asked for it
        (files_dir(svc, "proj") / "memory" / "n.md").write_text("rewritten about sailing\n")
        assert svc.search(ALICE, "sailing").hits == []  # not looked again yet
        assert svc.get(ALICE, "memory/n.md").updated_by == DISK  # reads always look
        assert svc.sync(ALICE).files_indexed == 1
        assert [h.path for h in svc.search(ALICE, "sailing").hits] == ["memory/n.md"]
    finally:
        svc.close()


@ON_SERVER_DISK
def test_symlinks_planted_in_the_mirror_are_refused(service: MemoryService, tmp_path: Path) -> None:
    service.write(ALICE, "real", path="MEMORY.md")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("outside secret password\n")
    os.symlink(outside, files_dir(service, "proj") / "memory")
    with pytest.raises(UnsafePathError):
        service.get(ALICE, "memory/x.md")
    with pytest.raises(UnsafePathError):
        service.write(ALICE, "overwrite", path="memory/x.md")
    with pytest.raises(UnsafePathError):
        service.write(ALICE, "new")  # the daily log lives under memory/
    with pytest.raises(UnsafePathError):
        service.delete(ALICE, "memory/x.md")
    assert [f.path for f in service.list(ALICE).files] == ["MEMORY.md"]
    assert service.search(ALICE, "outside secret password").hits == []
    assert sorted(p.name for p in outside.iterdir()) == ["x.md"]
    assert (outside / "x.md").read_text() == "outside secret password\n"


# status and sync -------------------------------------------------------------------------------------------


@ON_SERVER_DISK
def test_status_describes_the_callers_index(service: MemoryService) -> None:
    service.write(ALICE, "something to count", path="MEMORY.md")
    status = service.status(ALICE)
    assert (status.caller, status.index, status.access) == ("alice", "proj", "rw")
    assert (status.provider, status.model, status.dimensions) == ("test", "hashing-v1", 64)
    assert status.files == {"memory": 1} and status.chunks["memory"] >= 1
    assert status.pending_files == 0 and status.pending_vectors == 0
    assert status.search_modes == ["hybrid", "vector", "keyword"] and status.notice is None
    assert status.database_bytes > 0 and status.last_change_at and status.server_version
    (files_dir(service, "proj") / "memory").mkdir(exist_ok=True)
    (files_dir(service, "proj") / "memory" / "new.md").write_text("not yet indexed\n")
    assert service.status(ALICE).pending_files == 1


@ON_SERVER_DISK
def test_sync_reports_progress_per_file_and_force_reindexes_everything(service: MemoryService) -> None:
    service.write(ALICE, "kept", path="MEMORY.md")
    folder = files_dir(service, "proj") / "memory"
    folder.mkdir(exist_ok=True)
    for n in range(3):
        (folder / f"disk-{n}.md").write_text(f"written on disk {n}\n")
    calls: list[tuple[int, int, str]] = []
    out = service.sync(ALICE, progress=lambda done, total, path: calls.append((done, total, path)))
    assert (out.files_seen, out.files_indexed, out.cancelled) == (4, 3, False)
    assert calls == [(1, 3, "memory/disk-0.md"), (2, 3, "memory/disk-1.md"), (3, 3, "memory/disk-2.md")]
    calls.clear()
    forced = service.sync(ALICE, force=True, progress=lambda done, total, path: calls.append((done, total, path)))
    assert forced.files_indexed == 4 and [c[:2] for c in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert service.sync(READER).files_indexed == 0


@ON_SERVER_DISK
def test_sync_stops_when_cancelled(service: MemoryService) -> None:
    folder = files_dir(service, "proj") / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(5):
        (folder / f"f{n}.md").write_text(f"file {n}\n")
    seen: list[str] = []
    out = service.sync(ALICE, progress=lambda d, t, p: seen.append(p), cancelled=lambda: len(seen) >= 2)
    assert out.cancelled and out.files_indexed == 2
    assert service.status(ALICE).pending_files == 3
    assert service.sync(ALICE, cancelled=lambda: True).cancelled
    finished = service.sync(ALICE)
    assert finished.files_indexed == 3 and not finished.cancelled


@ON_SERVER_DISK
def test_many_files_changed_behind_the_engine_are_indexed_a_batch_per_search(service: MemoryService) -> None:
    service.write(ALICE, "kept", path="MEMORY.md")
    service.indexes.rescan_interval = 0  # every search looks again
    folder = files_dir(service, "proj") / "memory"
    folder.mkdir(exist_ok=True)
    for n in range(AUTO_INDEX_FILES + 8):  # as a replica finds after missing other servers' changes
        (folder / f"behind-{n:02d}.md").write_text(f"note {n} about the walrus\n")
    assert service.search(ALICE, "walrus").pending_files == 8
    assert service.search(ALICE, "walrus").pending_files == 0
    assert service.status(ALICE).pending_files == 0


# lifecycle ---------------------------------------------------------------------------------------------------


class GatedEmbedder(HashingEmbedder):
    """Blocks document embedding until released, to hold a write in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if kind == "document" and any("gate" in t for t in texts):
            self.entered.set()
            assert self.release.wait(timeout=30)
        return super().embed(texts, kind=kind)


def test_close_waits_for_a_write_in_flight_then_refuses_new_calls(tmp_path: Path, clock: Clock) -> None:
    embedder = GatedEmbedder()
    svc = MemoryService(tmp_path / "data", embedder, clock=clock)
    svc.status(ALICE)  # opens the index
    results: list[object] = []
    writer = threading.Thread(target=lambda: results.append(svc.write(ALICE, "gate keeper", path="memory/g.md")))
    writer.start()
    assert embedder.entered.wait(timeout=30)
    closer = threading.Thread(target=svc.close)
    closer.start()
    closer.join(timeout=0.2)
    assert closer.is_alive()  # still waiting for the write
    with pytest.raises(ServiceClosedError):
        svc.search(ALICE, "gate")
    embedder.release.set()
    writer.join(timeout=30)
    closer.join(timeout=30)
    assert not closer.is_alive() and len(results) == 1
    reopened = MemoryService(tmp_path / "data", HashingEmbedder(), clock=clock)
    try:
        assert reopened.get(ALICE, "memory/g.md").content == "gate keeper"
    finally:
        reopened.close()


# the real model ----------------------------------------------------------------------------------------------


@pytest.mark.model
def test_with_the_real_model_a_paraphrase_finds_the_written_note(tmp_path: Path, clock: Clock, local_embedder) -> None:
    svc = MemoryService(tmp_path / "data", local_embedder, clock=clock)
    try:
        svc.write(ALICE, "We moved the nightly backups from cron to a systemd timer.", topic="ops")
        svc.write(ALICE, "The design review approved the new colour palette.", topic="design")
        found = svc.search(ALICE, "scheduled database backup job", max_results=1)
        assert found.search_mode == "hybrid"
        assert "backups" in found.hits[0].snippet
    finally:
        svc.close()
