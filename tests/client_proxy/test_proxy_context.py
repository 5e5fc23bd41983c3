"""`memory-proxy context` (the SessionStart hook's text) and the starter memory files of `memory-proxy init`."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
import shlex
import socket

import pytest

from channel.keys import PrivateKey
from client_proxy.claude import settings_edit
from client_proxy.claude.hooks import EVENTS
from client_proxy.cli import build_parser, cmd_run, main
from client_proxy.project.context import (
    DAILY_LINES,
    MAX_FILE_BYTES,
    MAX_OUTPUT_CHARS,
    MEMORY_LINES,
    build_context,
    local_today,
    share,
)
from client_proxy.project.stack import Stack
from client_proxy.project.templates import MEMORY_TEMPLATE, install_templates
from tests.conftest import REPO

TODAY = dt.date(2026, 11, 23)
TODAY_LOG = "memory/2026-11-23.md"
YESTERDAY_LOG = "memory/2026-11-22.md"
SERVER = PrivateKey.generate("memory-server").public


def write(root, relpath: str, text: str) -> None:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def numbered(prefix: str, count: int) -> str:
    return "".join(f"{prefix} {n}\n" for n in range(1, count + 1))


@pytest.fixture
def project(tmp_path):
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_PROXY_HOME", str(tmp_path / "config" / "memory-proxy"))
    monkeypatch.chdir(tmp_path)  # `init` seeds the current folder by default: never the checkout

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


# the context text ------------------------------------------------------------------------------------------------


def test_memory_then_today_then_yesterday_each_under_a_header_naming_the_file(project):
    write(project, "MEMORY.md", "# Memory\nWe use SQLite.\n")
    write(project, YESTERDAY_LOG, "## 17:00 — yesterday\nShipped the parser.\n")
    write(project, TODAY_LOG, "## 09:00 — today\nFixing the build.\n")
    write(project, "memory/2026-11-21.md", "two days ago\n")
    write(project, "memory/decisions.md", "not a daily log\n")
    text = build_context(project, TODAY)
    headers = [line for line in text.splitlines() if line.startswith("=== ")]
    assert headers == ["=== MEMORY.md ===", f"=== {TODAY_LOG} (today) ===", f"=== {YESTERDAY_LOG} (yesterday) ==="]
    assert text.index("We use SQLite.") < text.index("Fixing the build.") < text.index("Shipped the parser.")
    assert "two days ago" not in text and "not a daily log" not in text


def test_lowercase_memory_md_is_used_when_it_is_the_one_present(project):
    write(project, "memory.md", "lowercase memory\n")
    assert build_context(project, TODAY).startswith("=== memory.md ===\nlowercase memory\n")


def test_memory_md_wins_over_lowercase_memory_md_when_both_exist(project):
    write(project, "MEMORY.md", "upper\n")
    if (project / "memory.md").exists():
        pytest.skip("case-insensitive file system: the two names are one file")
    write(project, "memory.md", "lower\n")
    text = build_context(project, TODAY)
    assert "upper" in text and "lower" not in text


def test_missing_files_are_skipped_silently(project):
    write(project, TODAY_LOG, "only today\n")
    assert build_context(project, TODAY) == f"=== {TODAY_LOG} (today) ===\nonly today\n"


def test_a_project_without_memory_gets_a_one_line_hint(project):
    (project / "memory").mkdir()
    write(project, "memory/2020-01-01.md", "an old log is not today's or yesterday's\n")
    text = build_context(project, TODAY)
    assert text.count("\n") == 1 and text.startswith("Project memory is empty")
    assert "2026-11-23" in text and str(project) in text


def test_memory_md_is_cut_after_its_first_lines_saying_how_many_remain(project):
    write(project, "MEMORY.md", numbered("fact", MEMORY_LINES + 57))
    lines = build_context(project, TODAY).splitlines()
    assert lines[1] == "fact 1" and lines[MEMORY_LINES] == f"fact {MEMORY_LINES}"
    assert f"fact {MEMORY_LINES + 1}" not in lines
    assert lines[MEMORY_LINES + 1] == f"[MEMORY.md: cut after {MEMORY_LINES} lines; 57 more lines not shown]"


def test_a_daily_log_shows_its_last_lines_saying_how_many_earlier_ones_were_left_out(project):
    write(project, TODAY_LOG, numbered("entry", DAILY_LINES + 30))
    lines = build_context(project, TODAY).splitlines()
    assert lines[1] == f"[{TODAY_LOG}: 30 earlier lines not shown]"
    assert lines[2] == "entry 31" and lines[-1] == f"entry {DAILY_LINES + 30}"


def test_huge_files_cannot_flood_the_context_and_each_file_keeps_a_share(project):
    long_line = "x" * 500
    write(project, "MEMORY.md", f"memory start\n{long_line}\n" * 150)
    write(project, TODAY_LOG, f"{long_line}\n" * 150 + "latest today\n")
    write(project, YESTERDAY_LOG, f"{long_line}\n" * 150 + "latest yesterday\n")
    text = build_context(project, TODAY)
    assert len(text) <= MAX_OUTPUT_CHARS
    # MEMORY.md keeps its start, the logs their latest entries, and every cut says so.
    assert text.startswith("=== MEMORY.md ===\nmemory start\n")
    assert "latest today" in text and "latest yesterday" in text
    assert "[MEMORY.md: cut after " in text and f"[{TODAY_LOG}: " in text and f"[{YESTERDAY_LOG}: " in text


def test_one_enormous_line_is_shortened_rather_than_dropped(project):
    write(project, "MEMORY.md", "y" * 1_500_000)
    text = build_context(project, TODAY)
    assert len(text) <= MAX_OUTPUT_CHARS and "yyyy…" in text


def utf16_units(text: str) -> int:
    """What Claude Code (JavaScript) counts as a string's length."""
    return len(text.encode("utf-16-le")) // 2


def test_the_output_limit_counts_utf16_units_as_claude_code_does_so_emoji_cannot_push_it_past(project):
    line = "- 🚀 deploy 𝐫𝐮𝐥𝐞𝐬: " + "🔥" * 40  # characters past U+FFFF: two UTF-16 units each
    write(project, "MEMORY.md", f"{line}\n" * 150)
    write(project, TODAY_LOG, f"{line}\n" * 150 + "latest today 🎉\n")
    text = build_context(project, TODAY)
    assert utf16_units(text) <= MAX_OUTPUT_CHARS
    assert utf16_units(text) > MAX_OUTPUT_CHARS * 0.9  # the room is used, not given away
    assert "[MEMORY.md: cut after " in text and "latest today 🎉" in text


def test_an_enormous_line_of_emoji_is_shortened_to_the_limit_without_splitting_a_character(project):
    write(project, "MEMORY.md", "🔥" * 400_000)
    text = build_context(project, TODAY)
    assert utf16_units(text) <= MAX_OUTPUT_CHARS and "🔥🔥…" in text
    text.encode("utf-8")  # no half of a surrogate pair left over


def test_a_small_file_leaves_its_unused_share_to_the_others():
    assert share(900, [100, 5000, 5000]) == [100, 400, 400]
    assert share(900, [10, 20, 30]) == [10, 20, 30]
    assert share(0, [10, 20]) == [0, 0]


def test_a_symlink_out_of_the_project_is_refused_with_a_note(project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("outside secret\n")
    (project / "MEMORY.md").symlink_to(outside / "secret.md")
    text = build_context(project, TODAY)
    assert "outside secret" not in text
    assert "[skipped MEMORY.md: it links outside the project]" in text


def test_a_memory_folder_linked_out_of_the_project_is_refused(project, tmp_path):
    outside = tmp_path / "elsewhere"
    write(outside, "2026-11-23.md", "elsewhere today\n")
    (project / "memory").symlink_to(outside)
    text = build_context(project, TODAY)
    assert "elsewhere today" not in text and f"[skipped {TODAY_LOG}: it links outside the project]" in text


def test_a_symlink_that_stays_inside_the_project_is_followed(project):
    write(project, "notes/main.md", "linked inside\n")
    (project / "MEMORY.md").symlink_to(project / "notes" / "main.md")
    assert "linked inside" in build_context(project, TODAY)


def test_a_project_reached_through_a_symlink_is_read(project, tmp_path):
    write(project, "MEMORY.md", "through the link\n")
    (tmp_path / "link").symlink_to(project)
    assert "through the link" in build_context(tmp_path / "link", TODAY)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("café".encode("latin-1") + b"\n", "not UTF-8 (invalid byte at offset 3)"),
        (b"text\x00binary", "binary (contains NUL bytes)"),
    ],
)
def test_a_file_that_is_not_utf8_text_is_skipped_with_a_note(project, data, reason):
    (project / "memory").mkdir()
    (project / TODAY_LOG).write_bytes(data)
    write(project, "MEMORY.md", "still shown\n")
    text = build_context(project, TODAY)
    assert "still shown" in text and f"[skipped {TODAY_LOG}: {reason}]" in text


def test_an_oversized_file_is_skipped_with_a_note(project):
    (project / "MEMORY.md").write_bytes(b"a" * (MAX_FILE_BYTES + 1))
    assert build_context(project, TODAY) == "[skipped MEMORY.md: larger than 2 MiB]\n"


def test_a_fifo_or_folder_named_like_a_memory_file_is_skipped_without_hanging(project):
    (project / "memory").mkdir()
    os.mkfifo(project / TODAY_LOG)
    (project / "MEMORY.md").mkdir()
    text = build_context(project, TODAY)
    assert f"[skipped {TODAY_LOG}: not a regular file]" in text and "[skipped MEMORY.md: not a regular file]" in text


def test_a_byte_order_mark_and_crlf_line_ends_are_not_shown(project):
    (project / "MEMORY.md").write_bytes(b"\xef\xbb\xbfline one\r\nline two\r\n")
    assert build_context(project, TODAY) == "=== MEMORY.md ===\nline one\nline two\n"


# dates in the laptop's zone ------------------------------------------------------------------------------------------


def test_today_is_the_date_in_the_laptops_zone_not_utcs():
    instant = dt.datetime(2026, 11, 23, 22, 30, tzinfo=dt.UTC)
    assert local_today(instant, "UTC") == dt.date(2026, 11, 23)
    assert local_today(instant, "Pacific/Auckland") == dt.date(2026, 11, 24)  # UTC+13 in November
    assert local_today(instant.replace(hour=3), "America/Los_Angeles") == dt.date(2026, 11, 22)


def test_the_same_instant_picks_different_logs_in_different_zones(project):
    write(project, "memory/2026-11-22.md", "sunday\n")
    write(project, "memory/2026-11-23.md", "monday\n")
    write(project, "memory/2026-11-24.md", "tuesday\n")
    instant = dt.datetime(2026, 11, 23, 22, 30, tzinfo=dt.UTC)
    auckland = build_context(project, local_today(instant, "Pacific/Auckland"))
    assert "=== memory/2026-11-24.md (today) ===\ntuesday" in auckland
    assert "=== memory/2026-11-23.md (yesterday) ===\nmonday" in auckland and "sunday" not in auckland
    london = build_context(project, local_today(instant, "Europe/London"))
    assert "=== memory/2026-11-23.md (today) ===\nmonday" in london and "tuesday" not in london


def test_yesterday_crosses_a_month_and_a_year(project):
    write(project, "memory/2026-12-31.md", "new year's eve\n")
    assert "=== memory/2026-12-31.md (yesterday) ===" in build_context(project, dt.date(2027, 1, 1))


# the command -----------------------------------------------------------------------------------------------------


def test_the_context_command_prints_the_memory_without_config_or_server(run, project, monkeypatch):
    write(project, "MEMORY.md", "remember this\n")
    monkeypatch.setenv("TZ", "UTC")
    write(project, f"memory/{dt.datetime.now(dt.UTC).date()}.md", "today's note\n")

    def no_network(*args, **kwargs):
        raise AssertionError("memory-proxy context must not open a connection")

    monkeypatch.setattr(socket, "socket", no_network)
    code, out, err = run("context", "--project", str(project))
    assert code == 0 and err == ""
    assert out.startswith("=== MEMORY.md ===\nremember this\n") and "today's note" in out


def test_the_context_command_reads_the_current_folder_by_default(run, tmp_path):
    write(tmp_path, "MEMORY.md", "from the cwd\n")
    code, out, _ = run("context")
    assert code == 0 and "from the cwd" in out


def test_the_context_command_exits_0_for_an_empty_project(run, project):
    code, out, _ = run("context", "--project", str(project))
    assert code == 0 and out.startswith("Project memory is empty")


def test_the_context_command_exits_2_when_the_project_folder_is_missing(run, tmp_path):
    code, out, err = run("context", "--project", str(tmp_path / "nowhere"))
    assert code == 2 and out == ""
    assert err.startswith("memory-proxy: error: no project folder ") and "nowhere" in err


def test_an_error_quoting_control_characters_prints_them_escaped(run, tmp_path):
    # An error may quote words from outside (a path, a server's refusal): OSC 52 there would set the clipboard.
    code, _, err = run("context", "--project", str(tmp_path / "x\x1b]52;c;ZXZpbA==\x07\rnowhere"))
    assert code == 2 and "\x1b" not in err and "\x07" not in err and "\r" not in err
    assert "x\\x1b]52;c;ZXZpbA==\\x07\\rnowhere" in err


# the starter files of `memory-proxy init` --------------------------------------------------------------------------


def init(run, project, *extra: str) -> tuple[int, str, str]:
    return run(
        "init", "--server", "https://memory.lan", "--server-key", SERVER.line(), "--project", str(project), *extra
    )


def test_init_creates_memory_md_and_the_project_context_once(run, project):
    write(project, "pyproject.toml", '[project]\nname = "demo"\nrequires-python = ">=3.11"\n')
    code, out, _ = init(run, project)
    assert code == 0
    assert "created MEMORY.md" in out and "created memory/project-context.md" in out
    assert (project / "MEMORY.md").read_text() == MEMORY_TEMPLATE
    context = (project / "memory" / "project-context.md").read_text()
    assert context.startswith("# Project context: demo\n") and "- test: `pytest`" in context
    code, out, _ = init(run, project)
    assert code == 0
    assert "kept the existing MEMORY.md" in out and "kept the existing memory/project-context.md" in out


def test_init_never_overwrites_existing_memory_files(run, project):
    write(project, "memory.md", "my own memory\n")
    write(project, "memory/project-context.md", "my own context\n")
    code, out, _ = init(run, project)
    assert code == 0 and "kept the existing memory.md" in out
    assert not (project / "MEMORY.md").exists() or (project / "MEMORY.md").samefile(project / "memory.md")
    assert (project / "memory.md").read_text() == "my own memory\n"
    assert (project / "memory" / "project-context.md").read_text() == "my own context\n"


def test_init_does_not_write_through_a_symlink_in_place_of_a_template(run, project, tmp_path):
    target = tmp_path / "target.md"
    (project / "memory").mkdir()
    (project / "memory" / "project-context.md").symlink_to(target)  # dangling: "x" mode must not create target
    code, out, _ = init(run, project)
    assert code == 0 and "kept the existing memory/project-context.md" in out and not target.exists()


def test_init_does_not_write_into_a_memory_folder_linked_out_of_the_project(run, project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "memory").symlink_to(outside)
    code, _, err = init(run, project)
    assert code == 1 and "memory/ links outside the project" in err
    assert list(outside.iterdir()) == [] and (project / "MEMORY.md").exists()
    assert (tmp_path / "config" / "memory-proxy" / "proxy.toml").exists()  # the key step was done first


def test_init_seeds_the_current_folder_by_default_and_no_templates_skips_it(run, tmp_path):
    code, _, _ = run("init", "--server", "https://memory.lan", "--server-key", SERVER.line(), "--no-templates")
    assert code == 0 and not (tmp_path / "MEMORY.md").exists() and not (tmp_path / "memory").exists()
    code, out, _ = run("init", "--server", "https://memory.lan", "--server-key", SERVER.line())
    assert code == 0 and (tmp_path / "MEMORY.md").exists() and (tmp_path / "memory" / "project-context.md").exists()
    assert f"Memory files in {tmp_path}" in out


def test_init_with_a_missing_project_folder_exits_2_before_creating_a_key(run, tmp_path):
    code, _, err = init(run, tmp_path / "nowhere")
    assert code == 2 and "no project folder" in err
    assert not (tmp_path / "config").exists()


def test_init_keeps_its_key_and_config_output_before_the_templates(run, project):
    code, out, _ = init(run, project)
    assert code == 0
    assert out.index("created a new device key") < out.index("memory-server callers add") < out.index("Memory files")


def test_install_templates_reports_a_failure_instead_of_raising(project):
    write(project, "memory", "a file where the memory folder should be\n")
    outcomes = install_templates(project, Stack())
    assert [(o.path, o.status) for o in outcomes] == [("MEMORY.md", "created"), ("memory/project-context.md", "failed")]
    assert outcomes[1].reason.startswith("cannot create memory/: ")


def no_permission_to_read(project, monkeypatch) -> str:
    """package.json as a file this user may not read: mode 000 where that refuses (not as root), else the system
    call's own answer to it, EACCES from open(2)."""
    write(project, "package.json", PACKAGE_JSON)
    if os.geteuid() != 0:
        os.chmod(project / "package.json", 0)
    else:
        real_open = os.open

        def refuse(path, *args, **kwargs):
            if os.path.basename(path) == "package.json":
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", refuse)
    return os.strerror(errno.EACCES)


def a_folder(project, _monkeypatch) -> str:
    (project / "package.json").mkdir()
    return "not a regular file"


def a_fifo(project, _monkeypatch) -> str:
    os.mkfifo(project / "package.json")  # opened without blocking: no writer ever comes
    return "not a regular file"


PACKAGE_JSON = '{"name": "webapp", "dependencies": {"react": "18"}}'


@pytest.mark.parametrize("make_unreadable", [no_permission_to_read, a_folder, a_fifo])
def test_init_names_a_manifest_it_cannot_read_instead_of_saying_none_was_found(
    run, project, monkeypatch, make_unreadable
):
    # package.json at mode 000 was taken for no manifest: the page said "No manifest found".
    reason = make_unreadable(project, monkeypatch)
    code, _, _ = init(run, project)
    assert code == 0
    page = (project / "memory" / "project-context.md").read_text()
    assert "No manifest found" not in page
    assert f"- **JavaScript** (`package.json`): package.json could not be read ({reason}); describe it by hand" in page


# the README's Claude Code section stays true -----------------------------------------------------------------------


def claude_code_section() -> str:
    text = (REPO / "README.md").read_text("utf-8")
    start = text.index("## Connecting Claude Code\n")
    return text[start : text.index("\n## ", start + 1)]


def test_the_readmes_mcp_json_is_what_install_claude_writes_and_its_hooks_are_the_installed_ones():
    section = claude_code_section()
    (mcp,) = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.DOTALL)]
    assert mcp == {"mcpServers": {"memory": settings_edit.server_entry("myproject")}}
    build_parser().parse_args(mcp["mcpServers"]["memory"]["args"])
    rows = re.findall(r"^\| `(\w+)` \| `(memory-proxy [^`]+)` \|", section, re.MULTILINE)
    assert rows == [(event, settings_edit.HOOKS[event]["command"]) for event in ("SessionStart", "Stop", "PreCompact")]
    for _, command in rows:
        program, *argv = shlex.split(command)
        args = build_parser().parse_args(argv)
        assert program == "memory-proxy" and args.command == "hook" and args.event in EVENTS


def test_the_readmes_claude_mcp_add_line_launches_a_valid_run_command():
    (line,) = [line for line in claude_code_section().splitlines() if line.startswith("claude mcp add ")]
    options, _, command = line.partition(" -- ")
    assert options.split()[-1] == "memory" and "--transport stdio" in options
    program, *argv = shlex.split(command)
    assert program == "memory-proxy" and build_parser().parse_args(argv).func is cmd_run


def test_terminal_escapes_in_a_synced_file_are_shown_escaped_not_sent_to_the_terminal(project):
    write(project, "MEMORY.md", "# Memory\nclipboard \x1b]52;c;ZXZpbA==\x07 and \rline over\tkept tab\n")
    text = build_context(project, TODAY)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "clipboard \\x1b]52;c;ZXZpbA==\\x07 and \\rline over\tkept tab" in text
