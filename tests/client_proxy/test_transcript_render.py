"""Claude Code sessions as markdown: one section per message under a session title, headings in messages demoted,
and parts that fit the server's file cap and stay byte for byte the same as a session grows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_proxy.transcripts.files import read_transcript
from client_proxy.transcripts.lines import Message, ToolCall, Transcript
from client_proxy.transcripts.render import render_markdown, session_title, split_parts
from server.index.markdown import heading_title, parse_sections, split_lines
from tests.transcript_fixtures import (
    CWD,
    SESSION,
    START,
    append_session,
    assistant_lines,
    at,
    command_line,
    custom_title_line,
    tool_result_line,
    tool_use,
    user_line,
    write_session,
)


def _session(tmp_path: Path) -> Transcript:
    read_call, test_call = tool_use("Read", file_path=f"{CWD}/src/auth.py"), tool_use("Bash", command="pytest -q")
    lines = [
        user_line("Login fails after  the\nupgrade, why?", ts=at(0)),
        *assistant_lines("The session token is never refreshed.", [read_call, test_call], ts=at(1)),
        tool_result_line(test_call["id"], "1 failed", is_error=True, ts=at(2)),
        command_line("/model", "opus", ts=at(3)),
        *assistant_lines("Fixed in `auth.py`.", ts=at(64)),
    ]
    return read_transcript(write_session(tmp_path, SESSION, lines))


def test_a_session_renders_as_a_titled_list_then_one_section_per_message(tmp_path: Path) -> None:
    assert render_markdown(_session(tmp_path), laptop="work-laptop") == (
        "# Session Login fails after the upgrade, why? (2025-06-01)\n"
        "\n"
        f"- session: {SESSION}\n"
        "- laptop: work-laptop\n"
        "- project: /home/me/app\n"
        "- branch: main\n"
        "- started: 2025-06-01 10:00 UTC\n"
        "\n"
        "## 2025-06-01 10:00 UTC · user\n"
        "\n"
        "Login fails after  the\n"
        "upgrade, why?\n"
        "\n"
        "## 2025-06-01 10:01 UTC · assistant\n"
        "\n"
        "The session token is never refreshed.\n"
        "\n"
        "- `Read` src/auth.py\n"
        "- `Bash` pytest -q (failed)\n"
        "\n"
        "## 2025-06-01 10:03 UTC · command\n"
        "\n"
        "/model opus\n"
        "\n"
        "## 2025-06-01 11:04 UTC · assistant\n"
        "\n"
        "Fixed in `auth.py`.\n"
        "\n"
        "_Ended 2025-06-01 11:04 UTC after 4 messages._\n"
    )


def test_the_title_is_the_explicit_one_else_the_first_words_else_the_session_id() -> None:
    words = "please " * 30
    asked = Transcript("s1", messages=(Message("command", None, "/init"), Message("user", None, words)))
    assert session_title(asked) == ("please " * 11).strip() + "…"
    assert session_title(Transcript("s1", title="Named", messages=asked.messages)) == "Named"
    bare = Transcript("s1", messages=(Message("assistant", None, "hello"),))
    assert render_markdown(bare, laptop="l").splitlines()[:2] == ["# Session s1", ""]
    assert "## assistant\n\nhello\n" in render_markdown(bare, laptop="l")
    assert render_markdown(Transcript("s1"), laptop="l").endswith("\n_0 messages._\n")
    assert render_markdown(Transcript("s1", messages=bare.messages), laptop="l").endswith("\n_1 message._\n")


def test_a_long_message_is_cut_with_a_visible_note() -> None:
    transcript = Transcript("s", messages=(Message("user", START, "a" * 120 + "\n" + "b" * 80),))
    markdown = render_markdown(transcript, laptop="l", max_message_chars=100)
    assert "\n\n" + "a" * 100 + "\n\n… [truncated: 101 more characters]\n\n_1 message._\n" in markdown


def test_headings_in_a_message_are_demoted_and_fences_closed_so_the_indexer_sees_one_heading_per_message() -> None:
    text = (
        "# Plan\n## Steps\n   ### Detail\n##### Deep\n###### Deepest\n#hashtag\n"
        "```md\n# inside code\n## also code\n```\n"
        "~~~~\n## code again\n~~~~~\n## after\n````python\n# never closed"
    )
    transcript = Transcript(
        "s",
        title="T",
        messages=(Message("assistant", START, text), Message("user", at(1), "```\n# cut inside code " + "x" * 50)),
    )
    markdown = render_markdown(transcript, laptop="l", max_message_chars=40)
    markdown_full = render_markdown(transcript, laptop="l", max_message_chars=1000)
    assert "### Plan\n#### Steps\n   ##### Detail\n###### Deep\n###### Deepest\n#hashtag\n" in markdown_full
    assert "```md\n# inside code\n## also code\n```\n~~~~\n## code again\n~~~~~\n#### after\n" in markdown_full
    assert "````python\n# never closed\n````\n" in markdown_full
    assert "```\n# cut inside code " + "x" * 18 + "\n```\n\n… [truncated: 32 more characters]" in markdown
    for rendered in (markdown, markdown_full):
        lines = split_lines(rendered)
        top = [
            heading
            for section in parse_sections(lines)
            for unit in section.units
            if unit.kind == "heading" and (heading := heading_title(lines[unit.start])) and heading[0] <= 2
        ]
        assert top == [(1, "Session T"), (2, "2025-06-01 10:00 UTC · assistant"),
                       (2, "2025-06-01 10:01 UTC · user")]  # fmt: skip


def test_a_turn_of_tool_calls_alone_renders_as_its_list() -> None:
    calls = (ToolCall("Grep", "TODO"), ToolCall("Read", "a.py", failed=True))
    markdown = render_markdown(Transcript("s", messages=(Message("assistant", START, "", calls),)), laptop="l")
    assert "## 2025-06-01 10:00 UTC · assistant\n\n- `Grep` TODO\n- `Read` a.py (failed)\n\n_1 message._\n" in markdown


# Parts


def _long_transcript(sizes: list[int], title: str | None = None) -> Transcript:
    messages = tuple(
        Message("assistant" if i % 2 else "user", at(i), f"message {i} " + "word " * (size // 5))
        for i, size in enumerate(sizes)
    )
    return Transcript("sess", title=title, cwd=CWD, started=START, ended=at(len(sizes)), messages=messages)


def _heads(parts: list[str]) -> list[str]:
    return [part.split("\n", 1)[0] for part in parts]


def test_a_session_that_fits_is_one_part_unchanged() -> None:
    markdown = render_markdown(_long_transcript([100] * 5), laptop="l")
    assert split_parts(markdown) == [markdown]


def test_parts_are_cut_between_messages_and_each_cites_the_session() -> None:
    markdown = render_markdown(_long_transcript([700] * 30, title="Big"), laptop="l")
    parts = split_parts(markdown, max_bytes=4096)
    assert len(parts) > 3
    assert all(len(part.encode()) <= 4096 for part in parts)
    title = "# Session Big (2025-06-01)"
    assert _heads(parts) == [title] + [f"{title} (part {n})" for n in range(2, len(parts) + 1)]
    head = markdown[: markdown.index("## ")]
    bodies = [part[part.index("\n## ") + 1 :] for part in parts]
    assert all(part.startswith(head.replace(title, heads)) for part, heads in zip(parts, _heads(parts), strict=True))
    assert all(body.startswith("## 2025-06-01 ") for body in bodies)
    assert head + "".join(bodies) == markdown
    assert parts[-1].endswith("_Ended 2025-06-01 10:30 UTC after 30 messages._\n")


def test_a_message_larger_than_a_part_is_cut_at_line_ends_then_inside_a_line() -> None:
    lines = "\n".join(f"line {i} " + "é" * 60 for i in range(200))
    one_line = "ü" * 9000
    transcript = Transcript("s", started=START, messages=(
        Message("user", START, "short"), Message("assistant", at(1), lines), Message("user", at(2), one_line),
        Message("assistant", at(3), "after"),
    ))  # fmt: skip
    markdown = render_markdown(transcript, laptop="l", max_message_chars=100_000)
    parts = split_parts(markdown, max_bytes=4096)
    assert all(len(part.encode()) <= 4096 for part in parts)
    assert sum(part.count("## 2025-06-01 10:01 UTC · assistant (continued)\n\n") for part in parts) > 3
    continued = [p for p in parts if "10:01 UTC · assistant (continued)" in p]
    assert all(p.split("(continued)\n\n", 1)[1].startswith("line ") for p in continued)
    joined = "".join(part.split("(continued)\n\n", 1)[-1] if "(continued)" in part else part for part in parts)
    assert lines in joined and one_line in joined.replace("\n", "")
    assert "## 2025-06-01 10:03 UTC · assistant\n\nafter\n" in parts[-1]


def test_headings_inside_fenced_code_never_start_a_part() -> None:
    text = "Try this:\n```markdown\n## Not a message\n\n" + "filler line\n" * 40 + "## Still code\n```\nDone."
    messages = tuple(Message("assistant", at(i), text) for i in range(20))
    parts = split_parts(render_markdown(Transcript("s", started=START, messages=messages), laptop="l"), 4096)
    assert len(parts) > 3
    for part in parts:
        body = part[part.index("\n\n## ") + 2 :]  # after the head's metadata list
        assert re.match(r"## 2025-06-01 10:\d\d UTC · assistant\n", body)
        assert sum(line.startswith("```") for line in body.split("\n")) % 2 == 0


def test_parts_need_room_for_more_than_the_head() -> None:
    with pytest.raises(ValueError, match="at least"):
        split_parts("# x\n", max_bytes=1000)
    head = "# Session x\n\n- project: " + "p" * 3000 + "\n\n"
    with pytest.raises(ValueError, match="no room"):
        split_parts(head + "## m\n\n" + "text\n" * 2000, max_bytes=4096)


def test_appending_to_a_growing_session_file_changes_only_the_last_part(tmp_path: Path) -> None:
    lines = [custom_title_line("Long job"), user_line("start", ts=at(0))]
    path = write_session(tmp_path, SESSION, lines)
    previous: list[str] = []
    for step in range(1, 40):
        tool = tool_use("Bash", command=f"make step{step}")
        lines += [
            *assistant_lines(f"Step {step}: " + "detail " * (30 + step * 7 % 50), [tool], ts=at(step)),
            tool_result_line(tool["id"], "out", is_error=step % 5 == 0, ts=at(step)),
            user_line(f"continue {step}", ts=at(step + 0.5)),
        ]
        append_session(path, lines)
        parts = split_parts(render_markdown(read_transcript(path), laptop="l"), max_bytes=4096)
        assert parts[: len(previous) - 1] == previous[:-1]
        assert len(parts) >= len(previous)
        previous = parts
    assert len(previous) > 5


def test_an_assistant_message_still_streaming_blocks_changes_only_the_last_part(tmp_path: Path) -> None:
    lines = [user_line("go", ts=at(0))]
    for i in range(12):
        lines += [*assistant_lines("answer " * 120, ts=at(i + 1)), user_line(f"more {i}", ts=at(i + 1))]
    blocks = assistant_lines("part one " * 100, [tool_use("Read", file_path=f"src/{i}.py") for i in range(30)])
    path = write_session(tmp_path, SESSION, lines)
    previous = split_parts(render_markdown(read_transcript(path), laptop="l"), max_bytes=4096)
    for count in range(1, len(blocks) + 1):
        append_session(path, lines + blocks[:count])
        parts = split_parts(render_markdown(read_transcript(path), laptop="l"), max_bytes=4096)
        assert parts[: len(previous) - 1] == previous[:-1]
        previous = parts
    assert "src/29.py" in previous[-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=9000), min_size=1, max_size=40), st.data())
def test_parts_of_any_prefix_are_the_parts_of_the_whole_but_the_last(sizes: list[int], data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=1, max_value=len(sizes)))
    whole = split_parts(render_markdown(_long_transcript(sizes), laptop="l"), max_bytes=8192)
    prefix = split_parts(render_markdown(_long_transcript(sizes[:cut]), laptop="l"), max_bytes=8192)
    assert whole[: len(prefix) - 1] == prefix[:-1]
    assert all(len(part.encode()) <= 8192 for part in whole)
