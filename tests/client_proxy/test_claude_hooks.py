"""`memory-proxy hook EVENT`: what Claude Code's SessionStart, PreCompact and Stop hooks print."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from client_proxy.claude import reminders
from client_proxy.claude.hooks import run_hook
from client_proxy.claude.reminders import EDITS_BEFORE_REMINDER, STOP_REMINDER
from client_proxy.cli import main


def _hook(event: str, payload: object, tmp_path: Path, **env: str) -> str:
    out = io.StringIO()
    environ = {"MEMORY_PROXY_STATE_HOME": str(tmp_path / "state"), "TZ": "UTC", **env}
    assert run_hook(event, io.BytesIO(json.dumps(payload).encode()), out, environ) == 0
    return out.getvalue()


def _tool_use(name: str, **tool_input: str) -> str:
    block = {"type": "tool_use", "id": "toolu_1", "name": name, "input": tool_input}
    return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [block]}}) + "\n"


class Session:
    """A Claude Code session's transcript file, written as the session goes on."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.transcript = tmp_path / "session.jsonl"
        self.transcript.write_text(json.dumps({"type": "user", "message": {"content": "fix the build"}}) + "\n")

    def edit(self, times: int, path: str = "/work/app/src/main.py") -> None:
        with self.transcript.open("a") as handle:
            handle.writelines(_tool_use("Edit", file_path=path) for _ in range(times))

    def save(self) -> None:
        with self.transcript.open("a") as handle:
            handle.write(_tool_use("mcp__memory__memory_write", content="decided X"))

    def stop(self, *, active: bool = False) -> str:
        payload = {"session_id": "s-1", "transcript_path": str(self.transcript), "stop_hook_active": active}
        return _hook("stop", {**payload, "hook_event_name": "Stop"}, self.tmp_path)


def test_stop_stays_quiet_until_the_agent_has_changed_files_a_few_times(tmp_path: Path) -> None:
    session = Session(tmp_path)
    session.edit(EDITS_BEFORE_REMINDER - 1)
    assert session.stop() == ""

    session.edit(1)

    assert json.loads(session.stop()) == {"decision": "block", "reason": STOP_REMINDER}


def test_stop_never_reminds_while_a_stop_hook_already_made_the_agent_go_on(tmp_path: Path) -> None:
    session = Session(tmp_path)
    session.edit(EDITS_BEFORE_REMINDER + 2)

    assert session.stop(active=True) == ""


def test_one_reminder_then_quiet_until_as_many_new_edits(tmp_path: Path) -> None:
    session = Session(tmp_path)
    session.edit(EDITS_BEFORE_REMINDER)
    assert session.stop() != ""

    assert session.stop() == ""  # the agent answered and stopped again: nothing new
    session.edit(EDITS_BEFORE_REMINDER - 1)
    assert session.stop() == ""
    session.edit(1)
    assert session.stop() != ""


def test_saving_to_memory_resets_the_count(tmp_path: Path) -> None:
    session = Session(tmp_path)
    session.edit(EDITS_BEFORE_REMINDER - 1)
    session.save()
    session.edit(EDITS_BEFORE_REMINDER - 1)
    assert session.stop() == ""

    session.edit(1, path="/work/app/memory/2026-11-25.md")  # writing a memory file by hand is saving too
    session.edit(EDITS_BEFORE_REMINDER - 1)
    assert session.stop() == ""


def test_a_line_still_being_written_is_counted_once_it_is_whole(tmp_path: Path) -> None:
    session = Session(tmp_path)
    session.edit(EDITS_BEFORE_REMINDER - 1)
    line = _tool_use("Write", file_path="/work/app/a.py")
    with session.transcript.open("a") as handle:
        handle.write(line[:20])
    assert session.stop() == ""

    with session.transcript.open("a") as handle:
        handle.write(line[20:])

    assert session.stop() != ""


@pytest.mark.parametrize("payload", [{}, {"session_id": "s", "transcript_path": "/nonexistent/t.jsonl"}, [1, 2]])
def test_stop_with_a_payload_it_cannot_use_prints_nothing(tmp_path: Path, payload: object) -> None:
    assert _hook("stop", payload, tmp_path) == ""


def test_garbage_transcript_lines_are_skipped() -> None:
    lines = [b"not json", b"[]", b'{"message": {"content": "text"}}', _tool_use("Edit", file_path="/a.py").encode()]

    assert reminders.count(lines, 0) == 1


def test_session_start_prints_the_memory_and_after_a_compaction_the_reminder(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "MEMORY.md").write_text("# Memory\n\nWe deploy with make ship.\n", "utf-8")

    started = _hook("session-start", {"source": "startup"}, tmp_path, CLAUDE_PROJECT_DIR=str(project))
    compacted = _hook("session-start", {"source": "compact", "cwd": str(project)}, tmp_path)

    assert "We deploy with make ship." in started
    assert reminders.COMPACT_REMINDER not in started
    assert "We deploy with make ship." in compacted
    assert compacted.rstrip().endswith(reminders.COMPACT_REMINDER)


def test_pre_compact_tells_the_user_what_happens(tmp_path: Path) -> None:
    assert _hook("pre-compact", {"trigger": "auto"}, tmp_path) == reminders.PRE_COMPACT_NOTE + "\n"


MALFORMED = [
    b"[" * 100_000,  # nested past the JSON reader's recursion limit
    b'{"cwd": 5, "session_id": 7, "transcript_path": ["t"]}',
    b'{"cwd": "/tmp/a\\u0000b", "session_id": "s", "transcript_path": "/tmp/a\\u0000b"}',
    b'{"cwd": "\\ud800", "session_id": "\\ud800", "transcript_path": "/etc/hostname"}',
    b"\xff\xfe not even UTF-8",
]


@pytest.mark.parametrize("event", ["session-start", "pre-compact", "stop"])
@pytest.mark.parametrize("payload", MALFORMED, ids=["deep", "wrong-types", "nul", "lone-surrogate", "not-utf8"])
def test_every_hook_exits_0_on_a_malformed_payload_and_session_start_still_loads_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], event: str, payload: bytes
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "MEMORY.md").write_text("# Memory\n\nWe deploy with make ship.\n", "utf-8")
    monkeypatch.chdir(project)  # Claude Code runs hooks in the project folder
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    monkeypatch.setenv("MEMORY_PROXY_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(payload)))

    assert main(["hook", event]) == 0

    out = capsys.readouterr().out
    assert ("We deploy with make ship." in out) == (event == "session-start")


def test_an_unexpected_fault_inside_a_hook_is_logged_and_the_hook_still_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object) -> str:
        raise RuntimeError("a fault of our own")

    monkeypatch.setattr("client_proxy.claude.hooks.build_context", broken)
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{}")))

    assert main(["hook", "session-start"]) == 0
    assert "memory-proxy hook session-start failed" in caplog.text
