"""`memory-proxy doctor` against a real server: each fault is named with its fix, and a sound set-up passes."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from channel.keys import PrivateKey, read_private_key, write_private_key
from client_proxy.claude.install import MAX_SETTINGS_BYTES, install
from client_proxy.config import DEVICE_KEY_FILE, prepare_home, render_config, write_config
from client_proxy.doctor import remote
from client_proxy.doctor.checks import Result, check_claude
from client_proxy.doctor.command import diagnose, report
from client_proxy.sync.state import StateStore
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer, eventually

INDEX = "team"


@dataclass
class Setup:
    server: ProductServer
    home: Path
    project: Path
    env: dict[str, str]

    def doctor(self) -> tuple[int, str]:
        out = io.StringIO()
        results = diagnose(self.env, project=str(self.project), index=None)
        return report(results, out), out.getvalue()


def _line(text: str, check: str) -> str:
    """The output line of one check (by the name it starts with), and its fix line when it failed."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line[5:].startswith(check + ":"):
            fix = lines[number + 1] if number + 1 < len(lines) and lines[number + 1].startswith("      fix:") else ""
            return line + "\n" + fix
    raise AssertionError(f"no {check} line in:\n{text}")


def _write_home(home: Path, server: ProductServer) -> PrivateKey:
    """What `memory-proxy init --index team` writes, done in process: a new device key and proxy.toml."""
    prepare_home(home)
    key = PrivateKey.generate("alice")
    write_private_key(home / DEVICE_KEY_FILE, key, overwrite=True)
    write_config(home, render_config(server.url, server.key.public, "alice", INDEX))
    return key


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    """A server that lets alice use `team`, her laptop's proxy home, a project registered with Claude Code."""
    server = ProductServer(tmp_path / "server", HashingEmbedder(), {"alice": {INDEX: "rw"}})
    home, project = tmp_path / "home", tmp_path / "project"
    key = _write_home(home, server)
    server.admit("alice", key.public)
    project.mkdir()
    (project / "MEMORY.md").write_text("# Memory\n", "utf-8")
    install(project, None)
    env = {
        "MEMORY_PROXY_HOME": str(home),
        "MEMORY_PROXY_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "TZ": "UTC",
    }
    server.start()
    try:
        yield Setup(server, home, project, env)
    finally:
        server.stop()


def test_a_config_that_does_not_parse_is_named_with_its_fix(setup: Setup) -> None:
    (setup.home / "proxy.toml").write_text('server_url = "http://x\n', "utf-8")

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "config")
    assert line.startswith("FAIL config:") and "is not valid TOML" in line
    assert "fix: memory-proxy init --server URL --server-key LINE" in line
    assert "not checked" in _line(text, "handshake")


def test_a_device_key_others_can_read_is_named_with_chmod(setup: Setup) -> None:
    key = setup.home / DEVICE_KEY_FILE
    os.chmod(key, 0o644)

    code, text = setup.doctor()

    assert code == 1
    assert _line(text, "config").startswith("ok ")
    line = _line(text, "device key")
    assert f"FAIL device key: {key} has mode 0644: other users can read it" in line
    assert f"fix: chmod 600 {key}" in line


def test_a_server_that_is_down_is_named(setup: Setup) -> None:
    setup.server.stop()

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "server")
    assert line.startswith("FAIL server: cannot reach the memory server at http://127.0.0.1:")
    assert "fix: start the server (memory-server serve)" in line
    assert "not checked (the server is not reachable)" in _line(text, "grant")


def test_a_wrong_pinned_key_is_named_with_both_fingerprints(setup: Setup) -> None:
    impostor = PrivateKey.generate("impostor")
    write_config(setup.home, render_config(setup.server.url, impostor.public, "alice", INDEX))

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "handshake")
    assert line.startswith(
        f"FAIL handshake: the server's key {setup.server.key.public.fingerprint} is not the pinned "
        f"{impostor.public.fingerprint}"
    )
    assert "memory-proxy init --server" in line


def test_a_device_without_a_grant_for_the_index_is_named_with_the_grant_command(setup: Setup) -> None:
    setup.server.stop()  # the operator lets alice use `other` only
    (setup.server.keys_dir / "callers.toml").unlink()
    setup.server.grants["alice"] = {"other": "rw"}
    setup.server.admit("alice", read_private_key(setup.home / DEVICE_KEY_FILE).public)
    setup.server.start()

    code, text = setup.doctor()

    assert code == 1
    assert _line(text, "handshake").startswith("ok ")
    line = _line(text, "grant")
    assert f"FAIL grant: device alice may not use index {INDEX}" in line
    assert f"fix: on the server: memory-server callers grant alice {INDEX}=rw" in line


def test_a_device_the_server_does_not_know_is_named_with_the_callers_add_command(setup: Setup) -> None:
    _write_home(setup.home, setup.server)  # a new key, never admitted

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "handshake")
    assert line.startswith("FAIL handshake: the server refused the channel handshake (HTTP 403)")
    assert "fix: on the server: memory-server callers add alice --key" in line


def test_a_project_not_registered_with_claude_code_is_named(setup: Setup) -> None:
    install(setup.project, None, remove=True)

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "Claude Code")
    assert "FAIL Claude Code: no MCP server runs memory-proxy and no SessionStart hook" in line
    assert f"fix: memory-proxy install-claude --project {setup.project}" in line


def test_a_sound_set_up_with_claude_code_closed_passes_with_a_warning_about_file_sync(setup: Setup) -> None:
    code, text = setup.doctor()

    assert code == 0, text
    lines = text.splitlines()
    number = next(n for n, line in enumerate(lines) if line.startswith("warn file sync:"))
    assert lines[number] == (
        f"warn file sync: no memory-proxy is watching {setup.project} now "
        "(files sync while Claude Code runs in the project)"
    )
    assert lines[number + 1].startswith("      hint: start Claude Code in the project")
    assert text.endswith("all checks passed\n")


def test_a_server_registered_in_a_claude_json_grown_past_a_settings_files_size_is_found(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    install(project, None)
    (project / ".mcp.json").unlink()  # registered in user scope instead: `claude mcp add --scope user`
    history = {f"/p/{n}": {"history": [{"display": "x" * 1000}]} for n in range(5000)}  # about 5 MiB
    server = {"type": "stdio", "command": "memory-proxy", "args": ["run"]}
    (tmp_path / ".claude.json").write_text(json.dumps({"mcpServers": {"memory": server}, "projects": history}))
    assert (tmp_path / ".claude.json").stat().st_size > MAX_SETTINGS_BYTES

    result = check_claude(project, {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path)})

    assert result.ok is True and f"MCP server in {tmp_path / '.claude.json'}" in result.line


def test_a_clock_far_from_the_servers_is_named() -> None:
    assert remote.check_clock(95.2) == Result(
        False,
        "clock: this laptop's clock is 95 s ahead of the server's",
        "turn on network time (NTP) on both machines",
    )
    assert remote.check_clock(-40.0).line == "clock: this laptop's clock is 40 s behind the server's"
    assert remote.check_clock(2.0).ok is True


def test_every_check_passes_on_a_sound_set_up_with_the_proxy_running(tmp_path: Path) -> None:
    server = ProductServer(tmp_path / "server", HashingEmbedder(), {"alice": {INDEX: "rw"}})
    laptop = Laptop(tmp_path / "alice", server, "alice", INDEX)
    laptop.write("MEMORY.md", "# Memory\n")
    install(laptop.project, None)
    env = {
        "MEMORY_PROXY_HOME": str(laptop.home),
        "MEMORY_PROXY_STATE_HOME": str(laptop.state),
        "HOME": str(tmp_path),
        "CLAUDE_CONFIG_DIR": str(laptop.claude_home),
        "TZ": "UTC",
    }
    store = StateStore(laptop.state, server.url, INDEX, Path(os.path.realpath(laptop.project)))
    server.start()
    try:
        with laptop.bare():
            anyio.run(lambda: eventually(store.claimed, "the proxy to hold the folder's sync lock"))
            out = io.StringIO()
            results = diagnose(env, project=str(laptop.project), index=None)
            code = report(results, out)
    finally:
        server.stop()

    text = out.getvalue()
    assert code == 0, text
    assert [result.ok for result in results] == [True] * 8
    assert text.endswith("all checks passed\n")
    assert f"file sync: a memory-proxy is watching {os.path.realpath(laptop.project)}" in text
