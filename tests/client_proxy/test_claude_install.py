"""`memory-proxy install-claude`: our server and hooks go into a real-looking Claude Code set-up and come out again,
leaving every setting of the user's as it was."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from channel.keys import PrivateKey
from client_proxy.claude import settings_edit
from client_proxy.claude.install import MAX_JSON_DEPTH, MAX_TRIES
from client_proxy.claude.settings_edit import HOOKS, SettingsFormatError
from client_proxy.cli import main
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "data" / "claude"


@pytest.fixture(autouse=True)
def state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where install notes the files it created: never the user's own state folder, nor the project."""
    folder = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("MEMORY_PROXY_STATE_HOME", str(folder))
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with the user's own `.claude/settings.json` and `.mcp.json` (copies of the fixtures)."""
    folder = tmp_path / "project"
    (folder / ".claude").mkdir(parents=True)
    shutil.copyfile(FIXTURES / "settings.json", folder / ".claude" / "settings.json")
    shutil.copyfile(FIXTURES / "mcp.json", folder / ".mcp.json")
    return folder


def _load(path: Path) -> dict:
    return json.loads(path.read_text("utf-8"))


def _install(project: Path, *extra: str) -> int:
    return main(["install-claude", "--project", str(project), *extra])


def test_install_keeps_every_setting_of_the_user_and_adds_the_server_and_three_hooks(project: Path) -> None:
    before = _load(FIXTURES / "settings.json")

    assert _install(project, "--index", "team") == 0

    after = _load(project / ".claude" / "settings.json")
    assert list(after) == list(before)  # same keys, same order
    assert {k: v for k, v in after.items() if k != "hooks"} == {k: v for k, v in before.items() if k != "hooks"}
    assert list(after["hooks"]) == [*before["hooks"], "PreCompact"]
    for event, groups in before["hooks"].items():
        assert after["hooks"][event][: len(groups)] == groups  # the user's own hooks first, untouched
    for event, handler in HOOKS.items():
        assert after["hooks"][event][-1] == {"hooks": [handler]}
    servers = _load(project / ".mcp.json")["mcpServers"]
    assert servers["github"] == _load(FIXTURES / "mcp.json")["mcpServers"]["github"]
    assert servers["memory"] == {"type": "stdio", "command": "memory-proxy", "args": ["run", "--index", "team"]}


def test_installing_again_changes_no_byte(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _install(project, "--index", "team")
    settings, mcp = (project / ".claude" / "settings.json").read_bytes(), (project / ".mcp.json").read_bytes()
    capsys.readouterr()

    assert _install(project) == 0
    assert _install(project, "--index", "team") == 0

    assert (project / ".claude" / "settings.json").read_bytes() == settings
    assert (project / ".mcp.json").read_bytes() == mcp
    assert capsys.readouterr().out.count("already in") == 4


def test_remove_restores_exactly_the_users_settings(project: Path) -> None:
    _install(project, "--index", "team")

    assert _install(project, "--remove") == 0

    for name, path in (("settings.json", ".claude/settings.json"), ("mcp.json", ".mcp.json")):
        restored, original = _load(project / path), _load(FIXTURES / name)
        assert restored == original
        assert json.dumps(restored) == json.dumps(original)  # the order of keys too, at every level
    assert _load(project / ".claude" / "settings.json")["hooks"]["Notification"] == []  # an empty list stays


def test_install_then_remove_on_a_bare_project_leaves_no_file_behind(tmp_path: Path) -> None:
    _install(tmp_path, "--index", "team")
    assert settings_edit.installed_hooks(_load(tmp_path / ".claude" / "settings.json")) == list(HOOKS)

    _install(tmp_path, "--remove")

    assert not (tmp_path / ".claude" / "settings.json").exists()
    assert not (tmp_path / ".mcp.json").exists()
    assert list(tmp_path.iterdir()) == []  # the `.claude/` install made is gone too


def test_remove_keeps_a_claude_folder_that_holds_the_users_own_files(tmp_path: Path) -> None:
    _install(tmp_path, "--index", "team")
    (tmp_path / ".claude" / "commands").mkdir()

    _install(tmp_path, "--remove")

    assert not (tmp_path / ".claude" / "settings.json").exists()
    assert [path.name for path in (tmp_path / ".claude").iterdir()] == ["commands"]


def test_remove_never_deletes_a_file_the_user_made_even_one_it_leaves_empty(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text("{}\n", "utf-8")
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {}}\n', "utf-8")
    _install(tmp_path, "--index", "team")

    assert _install(tmp_path, "--remove") == 0

    assert _load(tmp_path / ".claude" / "settings.json") == {}
    assert _load(tmp_path / ".mcp.json") == {}  # the emptied `mcpServers` goes, the file stays


def test_changing_the_index_keeps_the_users_env_program_path_and_other_arguments(project: Path) -> None:
    entry = {
        "type": "stdio",
        "command": "/home/u/.local/bin/memory-proxy",
        "args": ["run", "--index", "old", "--project", "/work/app"],
        "env": {"MEMORY_PROXY_HOME": "~/.config/memory-proxy-work"},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"memory": entry}}), "utf-8")

    assert _install(project, "--index", "notes") == 0

    assert _load(project / ".mcp.json")["mcpServers"]["memory"] == {
        **entry,
        "args": ["run", "--index", "notes", "--project", "/work/app"],
    }


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run"], ["run", "--index", "new"]),
        (["run", "--index=old", "--no-sync"], ["run", "--index", "new", "--no-sync"]),
        (["run", "--no-sync", "--index", "a", "--index", "b"], ["run", "--no-sync", "--index", "new"]),
        (["run", "--index"], ["run", "--index", "new"]),
    ],
)
def test_the_index_argument_is_replaced_in_place_or_added(args: list[str], expected: list[str]) -> None:
    document = {"mcpServers": {"memory": {"command": "memory-proxy", "args": args}}}
    assert settings_edit.add_server(document, "new")["mcpServers"]["memory"]["args"] == expected


def test_a_lone_surrogate_in_the_settings_is_written_back_escaped_and_both_files_are_written(project: Path) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_bytes(b'{"permissions": {"allow": ["Bash(echo \\ud83d)"]}}\n')  # as JavaScript may write it

    assert _install(project, "--index", "team") == 0

    written = settings.read_bytes()
    assert b'"Bash(echo \\ud83d)"' in written
    assert _load(settings)["permissions"] == {"allow": ["Bash(echo \ud83d)"]}
    assert "Stop" in settings_edit.installed_hooks(_load(settings))
    assert "memory" in _load(project / ".mcp.json")["mcpServers"]


@pytest.mark.parametrize(
    ("number", "fault"),
    [
        (b"1e400", "holds the number 1e400, beyond the range JSON readers keep"),
        (b"-1E+999", "holds the number -1E+999, beyond the range JSON readers keep"),
        (b"NaN", "holds NaN, which is not a JSON number"),
        (b"1" * 5000, "holds an integer too long to read"),
        (b"[" * 100_000, "is nested too deeply to read"),
    ],
)
def test_a_value_that_could_not_be_written_back_as_read_is_refused_and_nothing_changes(
    project: Path, capsys: pytest.CaptureFixture[str], number: bytes, fault: str
) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_bytes(b'{"env": {"X": "1"}, "feedbackSurveyRate": ' + number + b"}\n")
    before = settings.read_bytes(), (project / ".mcp.json").read_bytes()

    assert _install(project, "--index", "team") == 2

    assert f"{settings} {fault}: fix or move it" in capsys.readouterr().err
    assert (settings.read_bytes(), (project / ".mcp.json").read_bytes()) == before


def test_a_settings_file_that_is_not_json_is_refused_and_nothing_changes(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_text('{"permissions": {"allow": ["Bash(ls)"],}}\n', "utf-8")  # a trailing comma
    before = settings.read_bytes(), (project / ".mcp.json").read_bytes()

    assert _install(project, "--index", "team") == 2

    error = capsys.readouterr().err
    assert f"{settings} is not valid JSON (line 1, column 40)" in error
    assert "nothing was changed" in error
    assert (settings.read_bytes(), (project / ".mcp.json").read_bytes()) == before


def test_a_settings_path_that_is_a_fifo_is_refused_at_once_not_waited_on(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = project / ".claude" / "settings.json"
    settings.unlink()
    os.mkfifo(settings)  # opened to read without a writer, a plain open would wait forever
    before = (project / ".mcp.json").read_bytes()

    assert _install(project) == 2
    assert f"{settings} is not a regular file; nothing was changed" in capsys.readouterr().err
    assert (project / ".mcp.json").read_bytes() == before


def test_hooks_of_an_unexpected_shape_are_refused_and_nothing_changes(project: Path) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_text('{"hooks": {"Stop": {"command": "x"}}}', "utf-8")
    before = settings.read_bytes()

    assert _install(project) == 2
    assert settings.read_bytes() == before
    with pytest.raises(SettingsFormatError, match="must be a list of matcher groups"):
        settings_edit.add_hooks(json.loads(before))


def test_another_programs_server_named_memory_is_not_replaced(project: Path) -> None:
    (project / ".mcp.json").write_text('{"mcpServers": {"memory": {"command": "npx", "args": ["mem0"]}}}', "utf-8")
    settings_before = (project / ".claude" / "settings.json").read_bytes()

    assert _install(project) == 2

    assert _load(project / ".mcp.json")["mcpServers"]["memory"]["command"] == "npx"
    assert (project / ".claude" / "settings.json").read_bytes() == settings_before


def test_the_hand_written_context_hook_of_the_old_readme_is_replaced_not_doubled() -> None:
    old = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "memory-proxy context"}]}]}}

    new = settings_edit.add_hooks(old)

    assert new["hooks"]["SessionStart"] == [{"hooks": [HOOKS["SessionStart"]]}]
    assert settings_edit.remove_hooks(new) == {}
    assert old["hooks"]["SessionStart"][0]["hooks"][0]["command"] == "memory-proxy context"  # input not changed


@pytest.mark.parametrize(
    "command",
    [
        "memory-proxy context && cat docs/TEAM-RULES.md && ./scripts/check-vpn.sh",
        "memory-proxy hook stop; ./scripts/notify-slack.sh done",
        "memory-proxy hook stop|tee -a hook.log",
        "memory-proxy hook stop >> /tmp/hook.log 2>&1",
        "memory-proxy hook stop\n./scripts/notify.sh",
        "memory-proxy hook stop --verbose",
        "memory-proxy hook stop # and the team's notifier, see below",
        'memory-proxy context --project "$(git rev-parse --show-toplevel)"',
        "memory-proxy context --project=`pwd`",
    ],
)
def test_a_users_own_command_that_only_starts_like_ours_is_kept_by_install_and_by_remove(
    tmp_path: Path, command: str
) -> None:
    theirs = {"type": "command", "command": command}
    settings = {"hooks": {"Stop": [{"hooks": [theirs]}], "SessionStart": [{"matcher": "startup", "hooks": [theirs]}]}}
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(settings), "utf-8")

    assert _install(tmp_path, "--index", "team") == 0

    installed = _load(tmp_path / ".claude" / "settings.json")["hooks"]
    assert installed["Stop"] == [{"hooks": [theirs]}, {"hooks": [HOOKS["Stop"]]}]
    assert installed["SessionStart"] == [{"matcher": "startup", "hooks": [theirs]}, {"hooks": [HOOKS["SessionStart"]]}]

    assert _install(tmp_path, "--remove") == 0

    assert _load(tmp_path / ".claude" / "settings.json") == settings


@pytest.mark.parametrize(
    "command",
    [
        "memory-proxy context",
        'memory-proxy context --project "$CLAUDE_PROJECT_DIR"',
        "/usr/local/bin/memory-proxy context --project=/work/app",
        "~/.local/bin/memory-proxy  hook   pre-compact",
        "'/opt/memory proxy/bin/memory-proxy' hook stop",
    ],
)
def test_our_own_commands_are_recognised_with_any_path_and_spacing(command: str) -> None:
    assert settings_edit.is_ours(command)


def test_a_hook_sharing_a_group_with_ours_survives_the_removal() -> None:
    theirs = {"type": "command", "command": "echo done"}
    ours = {"type": "command", "command": "/opt/bin/memory-proxy hook stop"}
    settings = {"hooks": {"Stop": [{"hooks": [theirs, ours]}]}}

    assert settings_edit.remove_hooks(settings) == {"hooks": {"Stop": [{"hooks": [theirs]}]}}


def test_the_mode_of_the_settings_file_is_kept_and_a_symlink_is_followed(project: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    shutil.move(project / ".claude" / "settings.json", real)
    os.chmod(real, 0o600)
    (project / ".claude" / "settings.json").symlink_to(real)

    _install(project)

    assert (project / ".claude" / "settings.json").is_symlink()
    assert os.stat(real).st_mode & 0o777 == 0o600
    assert "Stop" in settings_edit.installed_hooks(_load(real))


def test_local_puts_the_hooks_in_the_uncommitted_settings_file(project: Path) -> None:
    shared = (project / ".claude" / "settings.json").read_bytes()

    _install(project, "--local")

    assert (project / ".claude" / "settings.json").read_bytes() == shared
    assert settings_edit.installed_hooks(_load(project / ".claude" / "settings.local.json")) == list(HOOKS)


def test_init_with_claude_registers_the_project_in_the_same_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_PROXY_HOME", str(tmp_path / "home"))
    server_key = PrivateKey.generate("memory-server").public.line()
    argv = ["init", "--server", "http://127.0.0.1:9", "--server-key", server_key, "--index", "team"]

    assert main([*argv, "--project", str(tmp_path), "--claude"]) == 0

    assert settings_edit.installed_hooks(_load(tmp_path / ".claude" / "settings.json")) == list(HOOKS)
    assert _load(tmp_path / ".mcp.json")["mcpServers"]["memory"]["command"] == "memory-proxy"
    assert (tmp_path / "MEMORY.md").exists()


def _big_settings(path: Path) -> None:
    """A settings file of some 300 KB: the user's long list of allowed commands."""
    path.write_text(json.dumps({"permissions": {"allow": [f"Bash(tool-{n})" for n in range(20_000)]}}), "utf-8")


@pytest.mark.parametrize("mcp_existed", [True, False], ids=["mcp-json-of-the-user", "mcp-json-made-by-install"])
def test_when_the_second_file_cannot_be_written_the_first_is_put_back_and_the_error_names_the_file(
    project: Path, state_home: Path, mcp_existed: bool
) -> None:
    settings, mcp = project / ".claude" / "settings.json", project / ".mcp.json"
    _big_settings(settings)
    before = settings.read_bytes()
    if mcp_existed:
        os.chmod(mcp, 0o600)
        mcp_before = mcp.read_bytes()
    else:
        mcp.unlink()
    limit = 100_000  # bytes a file may grow to: .mcp.json fits, the new settings.json does not (a full disk)

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    code = "import sys; from client_proxy.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "install-claude", "--project", str(project), "--index", "team"],
        cwd=REPO,
        env={**os.environ, "MEMORY_PROXY_STATE_HOME": str(state_home)},
        preexec_fn=limit_file_size,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2, done.stderr
    assert f"memory-proxy: error: cannot write {settings}: File too large; nothing was changed" in done.stderr
    assert settings.read_bytes() == before
    if mcp_existed:
        assert mcp.read_bytes() == mcp_before and os.stat(mcp).st_mode & 0o777 == 0o600
    else:
        assert not mcp.exists()
    assert list(state_home.rglob("*.created")) == []  # no note of a file install made: there is none


def test_a_read_only_settings_file_is_refused_before_anything_is_written(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = project / ".claude" / "settings.json"
    os.chmod(settings, 0o444)
    before = settings.read_bytes(), (project / ".mcp.json").read_bytes()

    assert _install(project, "--index", "team") == 2

    error = capsys.readouterr().err
    assert f"{settings} is read-only (mode 0444)" in error and "nothing was changed" in error
    assert (settings.read_bytes(), (project / ".mcp.json").read_bytes()) == before
    assert os.stat(settings).st_mode & 0o777 == 0o444


def _saved_meanwhile(monkeypatch: pytest.MonkeyPatch, path: Path, times: int) -> list[str]:
    """Make another program (Claude Code recording an approved permission) save `path` while install runs: after
    install has read it, before it writes, in its first `times` runs. Returns the permissions saved."""
    add_hooks = settings_edit.add_hooks
    saved: list[str] = []

    def add_hooks_while_the_file_is_saved(settings: dict) -> dict:
        if len(saved) < times:
            saved.append(f"Bash(npm test:{len(saved)})")
            path.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)", *saved]}}), "utf-8")
        return add_hooks(settings)

    monkeypatch.setattr(settings_edit, "add_hooks", add_hooks_while_the_file_is_saved)
    return saved


def test_a_settings_edit_saved_while_install_ran_is_kept_and_our_hooks_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}}), "utf-8")
    saved = _saved_meanwhile(monkeypatch, local, times=1)

    assert _install(tmp_path, "--local") == 0

    after = _load(local)
    assert after["permissions"] == {"allow": ["Bash(ls)", *saved]}
    assert settings_edit.installed_hooks(after) == list(HOOKS)
    assert _load(tmp_path / ".mcp.json")["mcpServers"]["memory"]["command"] == "memory-proxy"


def test_a_settings_file_that_keeps_changing_while_install_runs_is_refused_and_nothing_is_changed(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = project / ".claude" / "settings.json"
    mcp_before = (project / ".mcp.json").read_bytes()
    saved = _saved_meanwhile(monkeypatch, settings, times=MAX_TRIES)

    assert _install(project, "--index", "team") == 2

    assert "kept changing while install-claude ran" in capsys.readouterr().err
    assert _load(settings) == {"permissions": {"allow": ["Bash(ls)", *saved]}}  # the last save, as it was saved
    assert (project / ".mcp.json").read_bytes() == mcp_before


def _nested(depth: int) -> bytes:
    """A settings object whose nesting is `depth` levels deep (the object itself is the first)."""
    return b'{"x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}\n"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 600])
def test_settings_nested_past_the_depth_limit_are_refused_and_nothing_changes(
    project: Path, capsys: pytest.CaptureFixture[str], depth: int
) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_bytes(_nested(depth))
    before = settings.read_bytes(), (project / ".mcp.json").read_bytes()

    assert _install(project, "--index", "team") == 2

    error = capsys.readouterr().err
    assert f"{settings} is nested too deeply to read" in error and "nothing was changed" in error
    assert (settings.read_bytes(), (project / ".mcp.json").read_bytes()) == before


def test_settings_nested_up_to_the_depth_limit_are_edited(project: Path) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_bytes(_nested(MAX_JSON_DEPTH))

    assert _install(project, "--index", "team") == 0

    assert settings_edit.installed_hooks(_load(settings)) == list(HOOKS)
    assert _load(settings)["x"] == json.loads(_nested(MAX_JSON_DEPTH))["x"]
