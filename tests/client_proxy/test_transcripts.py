"""Claude Code transcripts: finding a project's session files and reading every kind of line liberally (the
markdown made of them is tested in test_transcript_render.py)."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_proxy.transcripts.files import (
    TranscriptError,
    belongs_to,
    claude_home,
    is_empty,
    munged_name,
    read_transcript,
    session_files,
    transcript_folders,
)
from client_proxy.transcripts.lines import Message, ToolCall, Transcript
from client_proxy.transcripts.render import render_markdown, split_parts
from tests.transcript_fixtures import (
    CWD,
    SESSION,
    START,
    ai_title_line,
    append_session,
    assistant_lines,
    at,
    command_line,
    command_markup,
    command_output_line,
    compact_summary_line,
    custom_title_line,
    envelope,
    image_block,
    project_folder,
    snapshot_line,
    summary_line,
    system_line,
    thinking,
    tool_result_line,
    tool_use,
    user_line,
    write_session,
)


def read(tmp_path: Path, lines: list, **kwargs: object) -> Transcript:
    return read_transcript(write_session(tmp_path / "sessions", SESSION, lines, **kwargs))


def texts(transcript: Transcript) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in transcript.messages]


# Finding the files


def test_claude_home_is_the_config_dir_when_set_else_dot_claude_in_home(tmp_path: Path) -> None:
    assert claude_home({"CLAUDE_CONFIG_DIR": str(tmp_path / "cfg"), "HOME": "/h"}) == tmp_path / "cfg"
    assert claude_home({"CLAUDE_CONFIG_DIR": "", "HOME": "/h"}) == Path("/h/.claude")
    assert claude_home({"HOME": "/h"}) == Path("/h/.claude")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/home/me/my_app.v2", "-home-me-my-app-v2"),
        ("/Users/me/.agents", "-Users-me--agents"),
        ("C:\\Users\\me\\app", "C--Users-me-app"),
        ("/home/me/café", "-home-me-caf-"),
        ("/home/me/\U0001f600app", "-home-me---app"),  # two UTF-16 units, two dashes, as JavaScript counts
    ],
)
def test_current_releases_munge_every_character_but_ascii_letters_and_digits(path: str, name: str) -> None:
    assert munged_name(path) == name


def test_folders_of_both_mungings_are_found_under_claude_config_dir(tmp_path: Path) -> None:
    project = tmp_path / "work" / "my_app.v2"
    project.mkdir(parents=True)
    config = tmp_path / "config"
    current = project_folder(config, project)
    legacy = config / "projects" / str(project).replace("/", "-").replace(".", "-")
    assert current != legacy
    current.mkdir(parents=True)
    legacy.mkdir()
    (config / "projects" / munged_name(str(tmp_path / "work" / "other"))).mkdir()
    environ = {"CLAUDE_CONFIG_DIR": str(config), "HOME": str(tmp_path / "home")}
    assert transcript_folders(project, environ) == [current, legacy]
    assert transcript_folders(project, {"HOME": str(tmp_path / "home")}) == []


def test_a_project_reached_through_a_symlink_finds_the_folders_of_both_paths(tmp_path: Path) -> None:
    real = tmp_path / "real" / "app"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    home = tmp_path / "home"
    by_real, by_link = project_folder(home / ".claude", real), project_folder(home / ".claude", link / "app")
    by_real.mkdir(parents=True)
    by_link.mkdir()
    assert transcript_folders(link / "app", {"HOME": str(home)}) == [by_real, by_link]
    assert transcript_folders(real, {"HOME": str(home)}) == [by_real]


def test_a_long_path_finds_the_folder_claude_code_cut_and_hashed(tmp_path: Path) -> None:
    project = tmp_path / ("deep_" * 45) / "app"
    name = munged_name(str(project))
    assert len(name) > 200
    folder = tmp_path / ".claude" / "projects" / f"{name[:200]}-k3j2h1"
    folder.mkdir(parents=True)
    (folder.parent / f"{name[:199]}x-k3j2h1").mkdir()  # another path's folder, differing inside the cut
    assert transcript_folders(project, {"HOME": str(tmp_path)}) == [folder]
    assert transcript_folders(project, {"HOME": str(tmp_path / "nobody")}) == []


def test_a_symlinked_project_folder_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = project_folder(tmp_path / ".claude", CWD)
    folder.parent.mkdir(parents=True)
    folder.symlink_to(elsewhere)
    assert transcript_folders(Path(CWD), {"HOME": str(tmp_path)}) == []


def test_session_files_are_top_level_regular_jsonl_files_in_path_order(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    b = write_session(first, "b-session", [user_line("hi")])
    a = write_session(first, "a-session", [user_line("hi")])
    c = write_session(second, "c-session", [user_line("hi")])
    write_session(first / "a-session" / "subagents", "agent-1", [user_line("side", sidechain=True)])
    (first / "a-session" / "tool-results").mkdir()
    (first / "a-session" / "tool-results" / "x.jsonl").write_text("{}\n")
    (first / "notes.txt").write_text("not a session")
    (first / "dir.jsonl").mkdir()
    (first / "link.jsonl").symlink_to(c)
    os.mkfifo(first / "pipe.jsonl")
    assert session_files([second, first, tmp_path / "gone"]) == [a, b, c]
    with pytest.raises(TranscriptError, match="cannot list"):
        session_files([a])


def test_a_symlinked_or_special_or_missing_session_file_is_refused(tmp_path: Path) -> None:
    path = write_session(tmp_path, SESSION, [user_line("hello")])
    (tmp_path / "link.jsonl").symlink_to(path)
    with pytest.raises(TranscriptError, match="symlink"):
        read_transcript(tmp_path / "link.jsonl")
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(TranscriptError, match="not a regular file"):
        read_transcript(tmp_path / "pipe.jsonl")
    with pytest.raises(TranscriptError, match="cannot open"):
        read_transcript(tmp_path / "missing.jsonl")


def test_only_sessions_that_ran_in_the_project_or_below_it_belong_to_it(tmp_path: Path) -> None:
    # /a/b-c and /a/b/c share one folder: each session's cwd says which project it is.
    folder = project_folder(tmp_path, "/a/b-c")
    assert folder == project_folder(tmp_path, "/a/b/c")
    dash = read_transcript(write_session(folder, "s1", [user_line("dash", cwd="/a/b-c")]))
    nested = read_transcript(write_session(folder, "s2", [user_line("nested", cwd="/a/b/c/sub")]))
    nowhere = read_transcript(write_session(folder, "s3", [summary_line("old", None)]))
    assert belongs_to(dash, Path("/a/b-c")) and not belongs_to(dash, Path("/a/b/c"))
    assert belongs_to(nested, Path("/a/b/c")) and not belongs_to(nested, Path("/a/b-c"))
    assert not belongs_to(nested, Path("/a/b/c/su"))
    assert belongs_to(nowhere, Path("/a/b/c"))


# Reading lines


def test_a_conversation_is_read_with_its_envelope_fields_and_times(tmp_path: Path) -> None:
    transcript = read(
        tmp_path,
        [
            snapshot_line(),
            user_line("Why does login fail?", ts=at(0), branch="fix/login"),
            *assistant_lines("The token expired.", ts=at(1.5)),
            user_line([{"type": "text", "text": "Here is the screen:"}, image_block()], ts=at(3)),
        ],
    )
    assert texts(transcript) == [
        ("user", "Why does login fail?"),
        ("assistant", "The token expired."),
        ("user", "Here is the screen:\n\n[image]"),
    ]
    assert [m.time for m in transcript.messages] == [at(0), at(1.5), at(3)]
    assert transcript.messages[0].time == datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
    assert (transcript.session_id, transcript.cwd, transcript.git_branch) == (SESSION, CWD, "fix/login")
    assert (transcript.started, transcript.ended, transcript.version) == (at(0), at(3), "2.0.14")
    assert transcript.title is None
    assert transcript.line_count == 4 and transcript.bad_lines == 0
    assert transcript.skipped_lines == {"file-history-snapshot": 1}


def test_the_session_id_comes_from_the_lines_else_the_file_name(tmp_path: Path) -> None:
    named = read_transcript(write_session(tmp_path, "file-stem", [user_line("hi", session="from-line")]))
    unnamed = read_transcript(write_session(tmp_path, "file-stem-2", [summary_line("s", None)]))
    assert (named.session_id, unnamed.session_id) == ("from-line", "file-stem-2")
    assert (unnamed.started, unnamed.ended, unnamed.messages) == (None, None, ())


def test_blocks_of_one_api_message_merge_and_thinking_is_left_out(tmp_path: Path) -> None:
    read_call = tool_use("Read", file_path=f"{CWD}/src/app.py")
    transcript = read(
        tmp_path,
        [
            user_line("Fix it", ts=at(0)),
            *assistant_lines("Let me look.", [read_call], blocks=[thinking("private musing")], ts=at(1)),
            tool_result_line(read_call["id"], "def app(): ...", ts=at(1)),
            *assistant_lines(
                "Tests pass.",
                [tool_use("Edit", file_path=f"{CWD}/src/app.py")],
                blocks=[{"type": "text", "text": "Fixed."}],
                ts=at(2),
            ),
        ],
    )
    assert texts(transcript) == [
        ("user", "Fix it"),
        ("assistant", "Let me look."),
        ("assistant", "Fixed.\n\nTests pass."),
    ]
    assert transcript.messages[1].tools == (ToolCall("Read", "src/app.py"),)
    assert transcript.messages[1].time == at(1)
    assert transcript.messages[2].tools == (ToolCall("Edit", "src/app.py"),)
    assert "private musing" not in repr(transcript)
    assert transcript.skipped_lines == {"thinking": 1, "tool-result": 1}


def test_tool_output_is_left_out_but_errors_are_counted_on_their_calls(tmp_path: Path) -> None:
    ok, bad = tool_use("Bash", command="pytest -q"), tool_use("Bash", command="npm test")
    transcript = read(
        tmp_path,
        [
            user_line("run the tests"),
            *assistant_lines(None, [ok, bad]),
            tool_result_line(ok["id"], "SECRET-OUTPUT 3 passed"),
            tool_result_line(bad["id"], "npm ERR! missing script", is_error=True),
            tool_result_line("toolu_unknown", "orphan", is_error=True),
        ],
    )
    assistant = transcript.messages[1]
    assert (assistant.text, assistant.tools) == (
        "",
        (ToolCall("Bash", "pytest -q"), ToolCall("Bash", "npm test", True)),
    )
    assert assistant.tool_errors == 1 and transcript.tool_errors == 2
    assert "SECRET-OUTPUT" not in repr(transcript)
    assert len(transcript.messages) == 2


def test_a_user_line_with_tool_results_and_words_keeps_the_words(tmp_path: Path) -> None:
    call = tool_use("Bash", command="ls")
    result = {"tool_use_id": call["id"], "type": "tool_result", "content": "a b", "is_error": True}
    transcript = read(
        tmp_path,
        [*assistant_lines(None, [call]), user_line([result, {"type": "text", "text": "stop, wrong folder"}])],
    )
    assert texts(transcript)[-1] == ("user", "stop, wrong folder")
    assert transcript.messages[0].tool_errors == 1


@pytest.mark.parametrize(
    ("name", "tool_input", "target"),
    [
        ("Read", {"file_path": f"{CWD}/src/app.py", "limit": 50}, "src/app.py"),
        ("Write", {"file_path": "/etc/hosts", "content": "x"}, "/etc/hosts"),
        ("Glob", {"pattern": "**/*.py", "path": f"{CWD}/src"}, "src"),
        ("NotebookEdit", {"notebook_path": f"{CWD}/nb.ipynb", "new_source": "x"}, "nb.ipynb"),
        ("Bash", {"command": "cd src &&\n  make test", "description": "run"}, "cd src &&"),
        ("Bash", {"command": "echo " + "x" * 200}, "echo " + "x" * 200),  # whole: rendering cuts, after redaction
        ("Grep", {"pattern": "TODO|FIXME", "output_mode": "content"}, "TODO|FIXME"),
        ("WebFetch", {"url": "https://example.com/docs", "prompt": "summarise"}, "https://example.com/docs"),
        ("WebSearch", {"query": "sqlite vec0 knn"}, "sqlite vec0 knn"),
        ("Task", {"description": "Find callers", "prompt": "Search the repo", "subagent_type": "x"}, "Find callers"),
        ("Task", {"prompt": "Look  at\n\nall " + "w" * 150}, "Look at all " + "w" * 150),
        ("TodoWrite", {"todos": [{"content": "a"}]}, ""),
        ("Odd", "not an object", ""),
        ("Odd", {"file_path": 7, "command": "  ", "query": "the query"}, "the query"),
    ],
)
def test_a_tool_call_is_summarised_by_what_it_acted_on(
    tmp_path: Path, name: str, tool_input: object, target: str
) -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": name, "input": tool_input}
    transcript = read(tmp_path, [*assistant_lines(None, [block])])
    assert transcript.messages[0].tools == (ToolCall(name, target),)


def test_sidechain_and_meta_lines_are_skipped(tmp_path: Path) -> None:
    transcript = read(
        tmp_path,
        [
            user_line("<local-command-caveat>Caveat: generated by local commands</local-command-caveat>", meta=True),
            user_line("real question", meta=False),
            user_line("subagent prompt", sidechain=True),
            *assistant_lines("subagent answer", sidechain=True),
            user_line("expanded /review prompt text", meta=True),
        ],
    )
    assert texts(transcript) == [("user", "real question")]
    assert transcript.skipped_lines == {"meta": 2, "sidechain": 2}


def test_system_reminders_and_caveats_are_cut_out_of_text(tmp_path: Path) -> None:
    transcript = read(
        tmp_path,
        [
            user_line("Please fix it.<system-reminder>\nThe user opened app.py\n</system-reminder>"),
            user_line([{"type": "text", "text": "<system-reminder>only this</system-reminder>"}]),
            user_line("<local-command-caveat>Caveat</local-command-caveat>\nAnd the tests."),
            *assistant_lines("Sure <system-reminder>x</system-reminder>done."),
        ],
    )
    assert texts(transcript) == [("user", "Please fix it."), ("user", "And the tests."), ("assistant", "Sure done.")]
    assert transcript.skipped_lines == {"empty": 1}


@pytest.mark.parametrize("system", [False, True])
def test_slash_commands_become_command_messages_and_their_output_is_left_out(tmp_path: Path, system: bool) -> None:
    transcript = read(
        tmp_path,
        [
            command_line("/model", "claude-opus-4", system=system, ts=at(1)),
            command_output_line("Set model to opus", system=system),
            command_line("/clear", system=system),
            command_output_line("", system=system),
        ],
    )
    assert texts(transcript) == [("command", "/model claude-opus-4"), ("command", "/clear")]
    assert transcript.messages[0].time == at(1)
    assert transcript.skipped_lines == {"command-output": 2}
    assert is_empty(transcript)


def test_command_markup_variants(tmp_path: Path) -> None:
    transcript = read(
        tmp_path,
        [
            user_line("<command-message>review is running…</command-message>\n<command-name>review</command-name>"),
            user_line("<bash-input>git status</bash-input>"),
            user_line("<bash-stdout>On branch main</bash-stdout><bash-stderr></bash-stderr>"),
            user_line("<local-command-stderr>failed</local-command-stderr>"),
            user_line(command_markup("/x") + " and then some words"),
            user_line("<command-args>no name</command-args>"),
            system_line("", subtype="local_command"),
            system_line("Compacting conversation", subtype="compact_boundary"),
        ],
    )
    assert texts(transcript)[:2] == [("command", "/review"), ("command", "!git status")]
    assert [role for role, _ in texts(transcript)[2:]] == ["user", "user"]  # not only markup: the user's own text
    assert transcript.skipped_lines == {"command-output": 2, "system": 1, "empty": 1}


def test_titles_custom_wins_over_ai_which_wins_over_a_summary_of_this_conversation(tmp_path: Path) -> None:
    first = user_line("How do I add a migration?")
    mine = summary_line("Adding a migration", first["uuid"])
    others = summary_line("Someone else's session", "uuid-in-another-file")
    assert read(tmp_path, [others, first]).title is None
    assert read(tmp_path, [mine, others, first]).title == "Adding a migration"
    assert read(tmp_path, [mine, first, ai_title_line("Migration help")]).title == "Migration help"
    lines = [custom_title_line("Old name"), mine, first, ai_title_line("AI"), custom_title_line("DB\nmigrations")]
    assert read(tmp_path, lines).title == "DB migrations"


def test_a_compaction_summary_is_kept_as_a_summary_message(tmp_path: Path) -> None:
    transcript = read(
        tmp_path,
        [
            user_line("first"),
            system_line("Conversation compacted", subtype="compact_boundary"),
            compact_summary_line("This session is being continued.\nSummary: we fixed login.", ts=at(9)),
            user_line("next"),
        ],
    )
    assert texts(transcript)[1] == ("summary", "This session is being continued.\nSummary: we fixed login.")
    assert transcript.messages[1].time == at(9)


def test_unknown_and_ignored_lines_and_blocks_are_counted_by_type(tmp_path: Path) -> None:
    transcript = read(
        tmp_path,
        [
            {"type": "queue-operation", "operation": "enqueue"},
            {"type": "attachment", "attachment": {}},
            {"type": "progress", "data": {}},
            {"type": "last-prompt", "lastPrompt": "x"},
            {"type": "mode", "mode": "plan"},
            {"type": "hologram", "x": 1},
            {"type": "hologram"},
            {"no": "type"},
            user_line([{"type": "text", "text": "look"}, {"type": "document", "source": {}}]),
            *assistant_lines("ok", blocks=[{"type": "redacted_thinking", "data": "x"}, {"type": "future_block"}]),
        ],
    )
    assert texts(transcript) == [("user", "look"), ("assistant", "ok")]
    assert transcript.unknown_lines == {"hologram": 2, "(no type)": 1}
    assert transcript.unknown_blocks == {"document": 1, "future_block": 1}
    assert transcript.skipped_lines == {
        "queue-operation": 1,
        "attachment": 1,
        "progress": 1,
        "last-prompt": 1,
        "mode": 1,
        "thinking": 1,
        "empty": 1,
    }


def test_a_content_block_whose_type_is_not_a_string_is_counted_as_unknown(tmp_path: Path) -> None:
    odd: list = [{"type": ["text"], "text": "x"}, {"type": {"k": 1}}, {"type": 3}]
    transcript = read(
        tmp_path,
        [
            user_line([{"type": "text", "text": "question"}, *odd]),
            *assistant_lines("answer", blocks=odd),
            *assistant_lines(None, blocks=[{"type": ["thinking"]}]),
        ],
    )
    assert texts(transcript) == [("user", "question"), ("assistant", "answer")]
    assert transcript.unknown_blocks == {"(no type)": 7}
    assert transcript.skipped_lines == {"empty": 4}


def test_a_line_longer_than_the_cap_is_skipped_as_bad_and_the_lines_after_it_are_read(tmp_path: Path) -> None:
    cap = 4096
    at_cap = user_line("fits", parent="u0")  # (a parent of its own: chaining lines would lengthen it)
    at_cap["pad"] = "p" * (cap - len(json.dumps(at_cap, separators=(",", ":")).encode()) - len(',"pad":""') - 1)
    long = user_line("too long " * 1000)  # 9 KB: read a chunk at a time and dropped
    lines = [user_line("before"), at_cap, long, user_line("after"), user_line("never finished " * 1000)]
    path = write_session(tmp_path, SESSION, lines, truncate_last=True)
    sizes = [len(line) + 1 for line in path.read_bytes().split(b"\n")]
    assert sizes[1] == cap and sizes[2] > 2 * cap and sizes[4] - 1 > cap  # the last has no newline yet
    transcript = read_transcript(path, max_line_bytes=cap)
    assert texts(transcript) == [("user", "before"), ("user", "fits"), ("user", "after")]
    assert (transcript.bad_lines, transcript.line_count) == (1, 4)
    assert transcript.complete_bytes == sum(sizes[:4])
    append_session(path, lines)
    assert texts(read_transcript(path, max_line_bytes=cap))[-1] == ("user", "after")
    assert read_transcript(path, max_line_bytes=cap).complete_bytes == path.stat().st_size


def test_broken_lines_in_the_middle_are_counted_and_the_rest_is_read(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    transcript = read(
        tmp_path,
        [
            user_line("before"),
            b'{"type":"user","message":{"content":"cut off by a cra',
            b"[1, 2]",
            deep,
            b"",
            b"   ",
            user_line(7),  # content that is neither text nor blocks
            envelope("assistant", None),
            compact_summary_line([]),
            {"type": "user", "message": "not an object", "isSidechain": "yes"},
            user_line("after") | {"timestamp": "not a time"},
        ],
    )
    assert texts(transcript) == [("user", "before"), ("user", "after")]
    assert transcript.bad_lines == 3 and transcript.line_count == 11
    assert transcript.skipped_lines == {"empty": 4}
    assert transcript.messages[1].time is None and transcript.ended == START


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_a_time_outside_the_years_utc_can_hold_costs_that_line_its_time_only(tmp_path: Path, stamp: str) -> None:
    transcript = read(tmp_path, [user_line("before"), user_line("odd") | {"timestamp": stamp}, user_line("after")])
    assert texts(transcript) == [("user", "before"), ("user", "odd"), ("user", "after")]
    assert transcript.messages[1].time is None and transcript.bad_lines == 0


def test_bytes_that_are_not_utf8_and_lone_surrogates_and_controls_become_replacement_characters(
    tmp_path: Path,
) -> None:
    line = json.dumps(user_line("café ok")).encode().replace(b"caf\\u00e9", b"caf\xe9")
    escaped = json.dumps(user_line("x")).replace('"x"', '"a\\ud800b\\u0000c\\r\\nd"')
    transcript = read(tmp_path, [line, escaped])
    assert texts(transcript) == [("user", "caf\ufffd ok"), ("user", "a\ufffdb\ufffdc\nd")]
    render_markdown(transcript, laptop="l").encode("utf-8")


def test_a_line_written_twice_is_read_once(tmp_path: Path) -> None:
    line = user_line("once")
    assert texts(read(tmp_path, [line, line])) == [("user", "once")]


def test_a_last_line_still_being_written_is_left_for_the_next_read(tmp_path: Path) -> None:
    lines = [user_line("question", ts=at(0)), *assistant_lines("a long answer " * 20, ts=at(1))]
    path = write_session(tmp_path, SESSION, lines, truncate_last=True)
    partial = read_transcript(path)
    first_line = path.read_bytes().index(b"\n") + 1
    assert texts(partial) == [("user", "question")]
    assert (partial.complete_bytes, partial.line_count, partial.bad_lines) == (first_line, 1, 0)
    assert path.stat().st_size > first_line
    append_session(path, lines)
    full = read_transcript(path)
    assert texts(full) == [("user", "question"), ("assistant", ("a long answer " * 20).strip())]
    assert full.complete_bytes == path.stat().st_size and full.line_count == 2


_KEYS = ["type", "message", "isSidechain", "isMeta", "isCompactSummary", "uuid", "timestamp", "cwd", "sessionId"]
_KEYS += ["subtype", "content", "summary", "leafUuid", "customTitle", "text", "id", "name", "input", "is_error"]
_VALUES = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
_VALUES |= st.sampled_from(["user", "assistant", "system", "summary", "local_command", "text", "tool_use"])
_JSON = st.recursive(
    _VALUES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=8), max_size=6))
def test_any_json_objects_read_and_render_without_raising(lines: list[dict]) -> None:
    with tempfile.TemporaryDirectory() as folder:  # not tmp_path: hypothesis runs many examples per test
        transcript = read_transcript(write_session(Path(folder), "s", lines))
    assert transcript.line_count == len(lines)
    split_parts(render_markdown(transcript, laptop="l"), max_bytes=4096)


def test_a_session_with_nothing_said_is_empty() -> None:
    assert is_empty(Transcript("s"))
    assert is_empty(Transcript("s", messages=(Message("command", None, "/clear"), Message("summary", None, "x"))))
    assert is_empty(Transcript("s", messages=(Message("assistant", None, "", (ToolCall("Read", "a"),)),)))
    assert not is_empty(Transcript("s", messages=(Message("user", None, "hi"),)))
