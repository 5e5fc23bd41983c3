"""The laptop's transcript uploader against the server's real `/sync/sessions` (inner app in process, real mirror
and index with the hashing embedder): which sessions go, when a growing one goes again, what is redacted before it
leaves, and what is sent when the proxy stops."""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from channel.authz import ChannelUser
from client_proxy.sync.api import SyncApi
from client_proxy.transcripts import upload as transcript_sync
from client_proxy.transcripts.batches import upload_batches
from client_proxy.transcripts.render import MAX_MESSAGE_CHARS, MAX_TARGET_CHARS, PART_BYTES, render_markdown
from client_proxy.transcripts.upload import QUIET, RESEND_LINES, TranscriptState, TranscriptUploader
from redaction import marker
from server.index.engine_settings import EngineSettings
from server.index.scan import ScanConfig
from server.memory.service import CallerContext, MemoryService
from syncproto.wire import MAX_PARTS_PER_UPLOAD, MAX_PUSH_BYTES
from tests.fakes.embedder import HashingEmbedder
from tests.inner_app import inner_clients
from tests.secret_corpus import B62, LOOK_ALIKES, PLANTED, rand
from tests.transcript_fixtures import (
    START,
    append_session,
    assistant_lines,
    at,
    project_folder,
    tool_use,
    user_line,
    write_session,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

INDEX = "team"
ALICE = ChannelUser("alice", "SHA256:alice", {INDEX: "rw"}, INDEX, "rw")
DAY = START.date().isoformat()
SESSION = "5b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.fixture
def service(hashing_service: MemoryService) -> MemoryService:
    return hashing_service


class Counting(SyncApi):
    """The real client calls, counted (and switchable off, as a server that is down)."""

    def __init__(self, client: httpx2.AsyncClient) -> None:
        super().__init__(client)
        self.uploads: list[list[int]] = []
        self.down = False

    async def upload_session(self, session: str, day: str, count: int, parts: Any) -> None:
        if self.down:
            raise httpx2.ConnectError("connection refused")
        self.uploads.append([number for number, _ in parts])
        await super().upload_session(session, day, count, parts)


@asynccontextmanager
async def client_as(service: MemoryService, user: ChannelUser) -> AsyncIterator[Counting]:
    """The sync client of a laptop the channel let in as `user`."""
    async with inner_clients(service, user) as clients:
        yield Counting(clients[user.name])


@pytest.fixture
async def api(service: MemoryService) -> AsyncIterator[Counting]:
    async with client_as(service, ALICE) as counting:
        yield counting


class Clock:
    def __init__(self) -> None:
        self.now = time.time() + 3600  # an hour after the sessions' files were written: all are quiet

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    folder.mkdir()
    return folder


def uploader(
    api: SyncApi, project: Path, tmp_path: Path, clock: Clock | None = None, **thresholds: int
) -> TranscriptUploader:
    state = TranscriptState(tmp_path / "state", "https://memory", INDEX, project)
    state.load()
    environ = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    return TranscriptUploader(
        api,
        project,
        environ,
        state,
        laptop="alice-laptop",
        server_url="https://memory",
        clock=clock or Clock(),
        **thresholds,  # type: ignore[arg-type]
    )


def conversation(project: Path, turns: int, word: str = "topic") -> list[Any]:
    lines: list[Any] = []
    for n in range(turns):
        lines.append(user_line(f"Question {n} about the {word} {n}?", cwd=str(project), ts=at(2 * n), session=SESSION))
        lines += assistant_lines(f"Answer {n}: the {word} works.", cwd=str(project), ts=at(2 * n + 1), session=SESSION)
    return lines


def stored(service: MemoryService) -> dict[str, str]:
    caller = CallerContext.from_user(ALICE)
    return {f.path: service.get(caller, f.path).content for f in service.list(caller, prefix="sessions/").files}


async def test_the_projects_sessions_are_uploaded_and_others_and_empty_ones_are_not(api, service, project, tmp_path):
    folder = project_folder(tmp_path / "claude", project)
    write_session(folder, SESSION, conversation(project, 3, "flaky login test"))
    other = str(project.parent / "other-app")  # a different project that munges to another name, but planted here
    write_session(folder, "aaaa1111", [user_line("Elsewhere entirely", cwd=other, session="aaaa1111")])
    write_session(folder, "bbbb2222", [user_line([], cwd=str(project), session="bbbb2222")])
    assert await uploader(api, project, tmp_path).pass_once()
    files = stored(service)
    assert list(files) == [f"sessions/alice/{DAY}-{SESSION}.md"]
    text = files[f"sessions/alice/{DAY}-{SESSION}.md"]
    assert "Question 2 about the flaky login test 2?" in text and "alice-laptop" in text
    hits = service.search(CallerContext.from_user(ALICE), "flaky login test", sources=["sessions"]).hits
    assert hits and hits[0].path.startswith("sessions/alice/") and "UTC" in hits[0].heading


async def test_a_growing_session_goes_again_after_enough_new_lines_or_once_it_is_quiet(api, service, project, tmp_path):
    clock = Clock()
    folder = project_folder(tmp_path / "claude", project)
    lines = conversation(project, 2)
    path = write_session(folder, SESSION, lines)
    running = uploader(api, project, tmp_path, clock)
    assert await running.pass_once() and len(api.uploads) == 1
    lines += conversation(project, 3, "second topic")[-2:]  # a couple of new lines
    append_session(path, lines)
    clock.now = path.stat().st_mtime + 1  # just written: not quiet
    assert await running.pass_once() and len(api.uploads) == 1
    clock.now += QUIET
    assert await running.pass_once() and len(api.uploads) == 2
    assert "second topic" in next(iter(stored(service).values()))
    lines += conversation(project, RESEND_LINES // 2 + 1, "burst")  # 40+ new lines: no need to wait
    append_session(path, lines)
    clock.now = path.stat().st_mtime + 1
    assert await running.pass_once() and len(api.uploads) == 3
    assert await running.pass_once() and len(api.uploads) == 3  # nothing new: nothing sent


async def test_a_line_still_being_written_waits_for_its_end(api, service, project, tmp_path):
    folder = project_folder(tmp_path / "claude", project)
    lines = [
        *conversation(project, 1),
        user_line("Half written question about caching", cwd=str(project), session=SESSION),
    ]
    path = write_session(folder, SESSION, lines, truncate_last=True)
    running = uploader(api, project, tmp_path)
    assert await running.pass_once()
    assert "caching" not in next(iter(stored(service).values()))
    append_session(path, lines)
    assert await running.pass_once()
    assert "Half written question about caching" in next(iter(stored(service).values()))


async def test_only_changed_parts_go_again_and_state_survives_a_restart(api, service, project, tmp_path, monkeypatch):
    monkeypatch.setattr(transcript_sync, "split_parts", lambda text: _small_parts(text))
    folder = project_folder(tmp_path / "claude", project)
    lines = conversation(project, 80, "partitioned")
    path = write_session(folder, SESSION, lines)
    assert await uploader(api, project, tmp_path).pass_once()
    [first] = api.uploads
    assert len(first) > 2
    lines += conversation(project, 2, "appended")[-2:]
    append_session(path, lines)
    restarted = uploader(api, project, tmp_path)  # a new proxy: the state file remembers what was sent
    assert await restarted.pass_once()
    assert api.uploads[1] == [len(first)] or api.uploads[1] == [len(first), len(first) + 1]
    assert len(stored(service)) >= len(first)


def _small_parts(text: str) -> list[str]:
    from client_proxy.transcripts.render import split_parts

    return split_parts(text, max_bytes=4096)


async def test_a_failing_server_keeps_the_session_pending_until_it_answers(api, service, project, tmp_path):
    write_session(project_folder(tmp_path / "claude", project), SESSION, conversation(project, 2))
    running = uploader(api, project, tmp_path)
    api.down = True
    assert not await running.pass_once()
    assert stored(service) == {}
    api.down = False
    assert await running.pass_once() and len(stored(service)) == 1


async def test_stopping_the_proxy_sends_the_last_lines_at_once(api, service, project, tmp_path, monkeypatch):
    monkeypatch.setattr(transcript_sync, "POLL", 0.05)
    clock = Clock()
    folder = project_folder(tmp_path / "claude", project)
    lines = conversation(project, 2)
    path = write_session(folder, SESSION, lines)
    running = uploader(api, project, tmp_path, clock)
    pass_done: list[anyio.Event] = []
    one_pass = running.pass_once

    async def observed_pass(*, flush: bool = False) -> bool:
        result = await one_pass(flush=flush)
        for event in pass_done:
            event.set()
        return result

    monkeypatch.setattr(running, "pass_once", observed_pass)
    async with anyio.create_task_group() as group:
        group.start_soon(running.run)
        with anyio.fail_after(10):
            while not api.uploads:
                await anyio.sleep(0.02)
        lines += conversation(project, 3, "final words")[-2:]
        append_session(path, lines)
        clock.now = path.stat().st_mtime + 1  # fresh: only the stop sends it
        for _ in range(2):  # two whole passes after the append (the first may have begun before it)
            pass_done[:] = [passed := anyio.Event()]
            with anyio.fail_after(10):
                await passed.wait()
        assert "final words" not in next(iter(stored(service).values()))
        group.cancel_scope.cancel()
    assert "final words" in next(iter(stored(service).values()))


async def test_every_planted_secret_is_redacted_before_upload_and_no_look_alike_is(
    api, service, project, tmp_path, monkeypatch
):
    # Messages whole (a base64 image look-alike is longer than the 8,000 characters a message is cut to).
    monkeypatch.setattr(transcript_sync, "render_markdown", functools.partial(render_markdown, max_message_chars=10**6))
    lines: list[Any] = []
    for n, case in enumerate(PLANTED):
        lines.append(user_line(f"Case {case.name}:\n{case.text}", cwd=str(project), ts=at(n), session=SESSION))
    for n, text in enumerate(LOOK_ALIKES):
        lines += assistant_lines(f"Look-alike {n}:\n{text}", cwd=str(project), ts=at(100 + n), session=SESSION)
    write_session(project_folder(tmp_path / "claude", project), SESSION, lines)
    assert await uploader(api, project, tmp_path).pass_once()
    text = "".join(stored(service).values())  # what the server keeps: what left the laptop
    leaked = [(case.name, secret[:12]) for case in PLANTED for secret in case.secrets if secret in text]
    assert leaked == []
    for kind in {kind for case in PLANTED for kind in case.kinds}:  # (the title repeats the first prompt's words)
        assert text.count(marker(kind)) >= sum(case.kinds.get(kind, 0) for case in PLANTED), kind
    damaged = [text_ for text_ in LOOK_ALIKES if any(line not in text for line in text_.splitlines() if line.strip())]
    assert damaged == []


async def test_a_secret_straddling_a_cut_is_redacted_before_the_transcript_is_shortened(
    api, service, project, tmp_path
):
    # A command is shown to 120 characters and a message to 8,000: a GitHub token cut there keeps 30 characters
    # of its body (recoverable from its checksum) and no longer matches its fixed-length rule.
    command_token, text_token = ("gh" + "p_" + rand(B62, 36) for _ in range(2))
    command = (
        "cd ~/src/acme-platform/services/billing-api-v2/worker && git clone https://oauth2:" + command_token + "@x.io/a"
    )
    assert command.index(command_token) + 10 < MAX_TARGET_CHARS < command.index(command_token) + len(command_token)
    text = "x " * ((MAX_MESSAGE_CHARS - 30) // 2) + "\n" + text_token + " done"
    assert text.index(text_token) + 10 < MAX_MESSAGE_CHARS < text.index(text_token) + len(text_token)
    lines = [
        user_line("Clone the platform repo", cwd=str(project), ts=at(0), session=SESSION),
        *assistant_lines(text, [tool_use("Bash", command=command)], cwd=str(project), ts=at(1), session=SESSION),
    ]
    write_session(project_folder(tmp_path / "claude", project), SESSION, lines)
    uploader_ = uploader(api, project, tmp_path)
    assert await uploader_.pass_once()
    stored_text = "".join(stored(service).values())
    assert command_token[4:14] not in stored_text and text_token[4:14] not in stored_text
    assert stored_text.count(marker("github-token")) == 2
    assert [sent.redacted for sent in uploader_.state.sessions.values()] == [2]  # each counted once


async def test_a_session_id_holding_a_secret_leaves_the_laptop_hashed(api, service, project, tmp_path):
    secret = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"  # an id names the server's files, and a name cannot be redacted
    lines = [user_line("What broke the nightly build?", cwd=str(project), ts=at(0), session=secret)]
    write_session(project_folder(tmp_path / "claude", project), secret, lines)
    assert await uploader(api, project, tmp_path).pass_once()
    files = stored(service)
    assert len(files) == 1 and not any(secret in path or secret in text for path, text in files.items())
    assert "nightly build" in next(iter(files.values()))


async def test_a_read_only_device_stops_uploading_at_the_first_refusal(service, project, tmp_path):
    write_session(project_folder(tmp_path / "claude", project), SESSION, conversation(project, 2))
    reader = ChannelUser("reader", "SHA256:reader", {INDEX: "r"}, INDEX, "r")
    async with client_as(service, reader) as api:
        running = uploader(api, project, tmp_path)
        with anyio.fail_after(10):
            await running.run()  # returns by itself: no retry loop against a refusal that cannot change
    assert running.stopped and len(api.uploads) == 1 and stored(service) == {}


async def test_a_session_the_server_refuses_is_set_aside_and_the_others_still_go(project, tmp_path):
    small = MemoryService(tmp_path / "small", HashingEmbedder(), EngineSettings(scan=ScanConfig(max_file_bytes=3000)))
    folder = project_folder(tmp_path / "claude", project)
    write_session(folder, SESSION, conversation(project, 40, "a long story"))  # over the server's 3,000 bytes
    other = "7e6d5c4b-3a29-4180-9f7e-6d5c4b3a2918"
    write_session(folder, other, [user_line("A short one.", cwd=str(project), session=other)])
    try:
        async with client_as(small, ALICE) as api:
            running = uploader(api, project, tmp_path)
            assert await running.pass_once()
            assert list(stored(small)) == [f"sessions/alice/{DAY}-{other}.md"]
            assert running.state.sessions[str(folder / f"{SESSION}.jsonl")].skipped == "refused by the server"
            assert await running.pass_once() and len(api.uploads) == 2  # not asked again until it grows
    finally:
        small.close()


async def test_the_configured_growth_thresholds_decide_when_a_session_goes_again(api, service, project, tmp_path):
    clock = Clock()
    folder = project_folder(tmp_path / "claude", project)
    lines = conversation(project, 2)
    path = write_session(folder, SESSION, lines)
    running = uploader(api, project, tmp_path, clock, delta_lines=2)
    assert await running.pass_once() and len(api.uploads) == 1
    lines += conversation(project, 3, "second topic")[-2:]  # two new lines: enough here, not by default (40)
    append_session(path, lines)
    clock.now = path.stat().st_mtime + 1  # just written: not quiet
    assert await running.pass_once() and len(api.uploads) == 2

    by_bytes = uploader(api, project, tmp_path, clock, delta_lines=100_000, delta_bytes=1024)
    lines += conversation(project, 12, "third topic")  # well over 1 KiB, fewer lines than asked for
    append_session(path, lines)
    clock.now = path.stat().st_mtime + 1
    assert await by_bytes.pass_once() and len(api.uploads) == 3
    assert "third topic" in next(iter(stored(service).values()))


@pytest.mark.slow  # the server indexes 9 MiB
@pytest.mark.sqlite_only("how the parts are packed in requests is the laptop's; the backend stores what arrives")
async def test_a_session_of_more_parts_than_one_request_can_carry_goes_up_in_full(api, service, project, tmp_path):
    # Half of every message is tabs, which JSON writes as two bytes each: a part weighs half as much again on the
    # wire as on disk, so only the body's encoded size tells when a request is full. (Long words index cheaply.)
    chunk = "abcdefghij" * 12 + "\t" * 120
    text = (chunk * (MAX_MESSAGE_CHARS // len(chunk)))[: MAX_MESSAGE_CHARS - 20]
    lines: list[Any] = []
    for n in range(620):
        lines.append(user_line(f"Q{n} {text}", cwd=str(project), ts=at(2 * n), session=SESSION))
        lines += assistant_lines(f"A{n} {text}", cwd=str(project), ts=at(2 * n + 1), session=SESSION)
    write_session(project_folder(tmp_path / "claude", project), SESSION, lines)
    running = uploader(api, project, tmp_path)
    assert await running.pass_once()
    [sent] = running.state.sessions.values()
    assert sent.skipped is None and len(sent.parts) >= 9
    assert len(api.uploads) > 1 and sorted(n for request in api.uploads for n in request) == [
        n + 1 for n in range(len(sent.parts))
    ]
    paths = [f"sessions/alice/{DAY}-{SESSION}{'' if n == 1 else f'.{n}'}.md" for n in range(1, len(sent.parts) + 1)]
    assert sorted(stored(service)) == sorted(paths)
    caller = CallerContext.from_user(ALICE)
    assert [file.hash for file in (service.read(caller, path) for path in paths) if file] == sent.parts  # whole


@pytest.mark.sqlite_only("no server: the packing alone")
def test_parts_are_packed_in_requests_within_the_servers_part_count_and_body_size():
    small = [(n, f"part {n}") for n in range(1, 41)]
    most = MAX_PARTS_PER_UPLOAD
    assert [len(batch) for batch in upload_batches(SESSION, DAY, 40, small)] == [most, most, 40 - 2 * most]
    escaped = [(n, '"\\\n' * (PART_BYTES // 3)) for n in range(1, 10)]  # every byte doubled by JSON
    batches = upload_batches(SESSION, DAY, 9, escaped)
    assert [[n for n, _ in batch] for batch in batches] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]  # 4 would pass the cap
    for batch in batches:
        body = {"session": SESSION, "day": DAY, "count": 9, "parts": [{"number": n, "content": c} for n, c in batch]}
        assert len(json.dumps(body, ensure_ascii=False).encode("utf-8")) <= MAX_PUSH_BYTES
    assert upload_batches(SESSION, DAY, 3, []) == [[]]  # nothing changed: the count alone still goes


async def test_a_session_file_that_cannot_be_read_is_set_aside_and_the_others_still_go(
    api, service, project, tmp_path, monkeypatch, caplog
):
    folder = project_folder(tmp_path / "claude", project)
    odd = "7e6d5c4b-3a29-4180-9f7e-6d5c4b3a2918"
    write_session(folder, odd, [user_line("A shape nobody foresaw.", cwd=str(project), session=odd)])
    write_session(folder, SESSION, conversation(project, 2, "ordinary"))
    real_read = transcript_sync.read_transcript

    def read(path: Path) -> Any:
        if path.stem == odd:
            raise TypeError("unhashable: 'the text of line 7'")  # a message may quote the file
        return real_read(path)

    monkeypatch.setattr(transcript_sync, "read_transcript", read)
    running = uploader(api, project, tmp_path)
    with caplog.at_level(logging.ERROR, logger="client_proxy"):
        assert await running.pass_once()
    assert list(stored(service)) == [f"sessions/alice/{DAY}-{SESSION}.md"]
    assert running.state.sessions[str(folder / f"{odd}.jsonl")].skipped == "unreadable"
    assert "TypeError" in caplog.text and "line 7" not in caplog.text
    assert await running.pass_once() and len(api.uploads) == 1  # not read again until it grows


async def test_a_session_file_past_64_mib_still_goes_up_with_its_overlong_line_skipped(api, service, project, tmp_path):
    folder = project_folder(tmp_path / "claude", project)
    path = write_session(folder, SESSION, conversation(project, 1, "before"))
    with path.open("r+b") as handle:  # a line of 65 MiB (sparse: NULs cost no disk), then the conversation goes on
        handle.seek(0, os.SEEK_END)
        handle.seek(65 * 1024 * 1024, os.SEEK_CUR)
        handle.write(b"\n")
    with path.open("ab") as handle:
        handle.write(b"".join(json.dumps(line).encode() + b"\n" for line in conversation(project, 3, "after")[-2:]))
    running = uploader(api, project, tmp_path)
    assert await running.pass_once()
    text = stored(service)[f"sessions/alice/{DAY}-{SESSION}.md"]
    assert "the before works" in text and "Question 2 about the after 2?" in text
    assert running.state.sessions[str(path)].covered == path.stat().st_size


async def test_two_session_files_with_one_session_id_inside_are_kept_apart_on_the_server(
    api, service, project, tmp_path
):
    folder = project_folder(tmp_path / "claude", project)
    forked = "55555555-5555-4555-8555-555555555555"  # a copy of SESSION's file, gone on as another conversation
    write_session(folder, SESSION, conversation(project, 1, "alpha billing"))
    write_session(folder, forked, conversation(project, 1, "bravo login"))
    write_session(folder, "not an id", [user_line("Charlie search", cwd=str(project), session="c0ffee-1")])
    running = uploader(api, project, tmp_path)
    assert await running.pass_once() and await running.pass_once()
    files = stored(service)
    assert sorted(files) == [f"sessions/alice/{DAY}-{name}.md" for name in sorted([SESSION, forked, "c0ffee-1"])]
    assert "alpha billing" in files[f"sessions/alice/{DAY}-{SESSION}.md"]
    assert "bravo login" in files[f"sessions/alice/{DAY}-{forked}.md"]


async def test_a_secret_in_the_session_id_is_redacted_before_the_title_and_metadata_cut_it(
    api, service, project, tmp_path
):
    # The id is shown on the `- session:` line (to 300 characters) and as the title (to 80) when nobody spoke
    # first: a GitHub token straddling either cut would keep its head and no longer match its rule.
    token = "gh" + "p_" + rand(B62, 36)
    folder = project_folder(tmp_path / "claude", project)
    meta = [user_line("What broke the nightly build?", cwd=str(project), ts=at(0))]
    title = assistant_lines("The nightly build broke on the cache step.", cwd=str(project), ts=at(0))
    for name, width, lines in (("meta-cut", 300, meta), ("title-cut", 80, title)):
        session = "n" * (width - 30) + "-" + token
        write_session(folder, name, [line | {"sessionId": session} for line in lines])
    assert await uploader(api, project, tmp_path).pass_once()
    files = stored(service)
    assert len(files) == 2 and all(marker("github-token") in text for text in files.values())
    assert not any(token[4:14] in text for text in files.values())


async def test_a_session_without_times_keeps_the_day_it_first_went_up_under_as_it_grows(
    api, service, project, tmp_path
):
    def line(text: str, n: int) -> Any:  # epoch milliseconds: not a time this reader takes
        return user_line(text, cwd=str(project), session=SESSION, uuid=f"u{n}") | {"timestamp": 1764000000000 + n}

    lines = [line("Day one: why does the deploy hang?", 0)]
    path = write_session(project_folder(tmp_path / "claude", project), SESSION, lines)
    three_days_ago = time.time() - 3 * 86400
    os.utime(path, (three_days_ago, three_days_ago))
    first_day = time.strftime("%Y-%m-%d", time.gmtime(three_days_ago))
    assert await uploader(api, project, tmp_path).pass_once()
    lines.append(line("Day three: it was the DNS cache.", 1))
    append_session(path, lines)  # written today
    restarted = uploader(api, project, tmp_path)  # the day is remembered in the state file
    assert await restarted.pass_once() and len(api.uploads) == 2
    files = stored(service)
    assert list(files) == [f"sessions/alice/{first_day}-{SESSION}.md"]
    assert "DNS cache" in files[f"sessions/alice/{first_day}-{SESSION}.md"]
    # A state file of an older version, without days, still loads.
    document = json.loads(restarted.state.path.read_bytes())
    for entry in document["sessions"].values():
        del entry["day"]
    restarted.state.path.write_text(json.dumps(document))
    restarted.state.load()
    assert [sent.day for sent in restarted.state.sessions.values()] == [None]
    assert [sent.covered for sent in restarted.state.sessions.values()] == [path.stat().st_size]


async def test_a_long_last_line_never_finished_is_not_read_again_until_the_file_changes(
    api, service, project, tmp_path
):
    lines = [*conversation(project, 2), user_line("caching " + "x" * 8192, cwd=str(project), session=SESSION)]
    path = write_session(project_folder(tmp_path / "claude", project), SESSION, lines, truncate_last=True)
    running = uploader(api, project, tmp_path, delta_bytes=1024)  # the unfinished line alone is past the delta
    assert await running.pass_once() and len(api.uploads) == 1

    def saved() -> tuple[int, int]:  # each save writes a new file in its place
        info = running.state.path.stat()
        return info.st_ino, info.st_mtime_ns

    before = saved()
    assert await running.pass_once() and await running.pass_once(flush=True)
    assert saved() == before and len(api.uploads) == 1  # neither read, rendered nor recorded again
    append_session(path, lines)
    assert await running.pass_once() and len(api.uploads) == 2
    assert "caching xxx" in next(iter(stored(service).values()))
