"""`memory-proxy doctor` against a real server: each fault is named with its fix, and a sound set-up passes."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from channel.keys import PrivateKey, read_private_key, write_private_key
from client_proxy.claude.install import MAX_SETTINGS_BYTES, install
from client_proxy.config import DEVICE_KEY_FILE, prepare_home, render_config, write_config
from client_proxy.doctor import remote
from client_proxy.doctor.checks import Result, check_claude
from client_proxy.doctor.command import diagnose, report
from client_proxy.doctor.indexes import entry_index
from client_proxy.sync.state import StateStore
from server.memory.caller import CallerContext
from server.mirror.state import CallerSync
from server.sync.service import SyncService
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer, eventually

INDEX = "team"


@dataclass
class Setup:
    server: ProductServer
    home: Path
    project: Path
    env: dict[str, str]

    def doctor(self, index: str | None = None) -> tuple[int, str]:
        out = io.StringIO()
        results = diagnose(self.env, project=str(self.project), index=index)
        return report(results, out), out.getvalue()

    def point_at(self, url: str, index: str | None = INDEX) -> None:
        """proxy.toml as `memory-proxy init` writes it, with this server_url (the real server's key pinned)."""
        write_config(self.home, render_config(url, self.server.key.public, "alice", index))

    async def doctor_within(self, seconds: float) -> tuple[int, str]:
        """`doctor` in a worker thread, given up on (left to end when its server goes) after `seconds`."""
        with anyio.fail_after(seconds):
            return await anyio.to_thread.run_sync(self.doctor, abandon_on_cancel=True)


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
    assert "a key once revoked is refused for good: then make a new one here with memory-proxy init --force" in line


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

    # The hint's own command keeps a proxy syncing the folder (one run with stdin closed stopped at once).
    command = lines[number + 1].split("in a terminal (it stops when its stdin closes): ", 1)[1]
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, **setup.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    running = subprocess.Popen(["sh", "-c", command], env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        store = StateStore(Path(setup.env["MEMORY_PROXY_STATE_HOME"]), setup.server.url, INDEX, setup.project)
        anyio.run(lambda: eventually(store.claimed, "the hinted command to hold the folder's sync lock", within=30))
        assert "file sync: a memory-proxy is watching" in setup.doctor()[1]
    finally:
        os.killpg(running.pid, signal.SIGTERM)
        running.wait(timeout=30)


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


# What sits at a wrong server_url, or between the laptop and its server on plain HTTP: real sockets. ------------

Answer = Callable[["Hostile", socket.socket, bytes], None]
FLOOD_BYTES = 64 * 1024 * 1024  # an answer larger than doctor reads, small enough to read whole (the old doctor did)


@dataclass
class Hostile:
    """An HTTP service on a real 127.0.0.1 socket, each connection's request answered by `answer` in a thread."""

    answer: Answer
    stop: threading.Event = field(default_factory=threading.Event)
    heads: list[bytes] = field(default_factory=list)  # the request lines and headers it received
    sent: int = 0  # bytes of bodies sent, over all connections

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, listener: socket.socket) -> None:
        self.port = listener.getsockname()[1]
        threads: list[threading.Thread] = []
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # the listener was shut down
                break
            thread = threading.Thread(target=self._handle, args=(conn,))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)  # a blocked send wakes up to see `stop`
        with conn:
            try:
                head = _read_request(conn)
                self.heads.append(head)
                self.answer(self, conn, head)
            except OSError:  # the client went away, or timed out: what these servers expect
                pass


@contextmanager
def hostile(answer: Answer) -> Iterator[Hostile]:
    server = Hostile(answer)
    listener = socket.create_server(("127.0.0.1", 0))
    server.port = listener.getsockname()[1]
    acceptor = threading.Thread(target=server.serve, args=(listener,))
    acceptor.start()
    try:
        yield server
    finally:
        server.stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listener.close()
        acceptor.join()


def _read_request(conn: socket.socket) -> bytes:
    """The request's head; its body (by Content-Length) is read and dropped, so closing sends no reset."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length[1]):
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head


def _answer(status: int, body: bytes, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, size) + body


def drip(server: Hostile, conn: socket.socket) -> None:
    """200 with a long body promised, then one byte every 50 ms: every read succeeds, the answer never ends."""
    conn.sendall(_answer(200, b"", 10**9))
    while not server.stop.wait(0.05):
        conn.sendall(b" ")
        server.sent += 1


def healthz_then(post: Callable[[Hostile, socket.socket], None]) -> Answer:
    """A `/healthz` like the memory server's; `post` answers everything else (the channel's POSTs)."""

    def answer(server: Hostile, conn: socket.socket, head: bytes) -> None:
        if head.startswith(b"GET /healthz "):
            conn.sendall(_answer(200, b'{"status":"ok"}'))
        else:
            post(server, conn)

    return answer


def test_a_healthz_answer_that_never_ends_fails_the_server_check_by_its_deadline(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "HEALTH_DEADLINE", 0.5)
    with hostile(lambda server, conn, head: drip(server, conn)) as server:
        setup.point_at(server.url)

        code, text = anyio.run(setup.doctor_within, 10.0)

    assert code == 1
    line = _line(text, "server")
    assert line.startswith(
        f"FAIL server: {server.url}/healthz did not finish answering within 0.5 s (its answer trickled in)"
    )
    assert "fix: start the server (memory-server serve), or correct server_url in" in line
    assert "not checked (the server is not reachable)" in _line(text, "handshake")


def test_a_healthz_answer_larger_than_a_memory_servers_is_not_read_to_its_end(setup: Setup) -> None:
    def flood(server: Hostile, conn: socket.socket, head: bytes) -> None:
        conn.sendall(_answer(200, b"", FLOOD_BYTES))
        chunk = b" " * 65536
        for _ in range(FLOOD_BYTES // len(chunk)):
            conn.sendall(chunk)
            server.sent += len(chunk)

    with hostile(flood) as server:
        setup.point_at(server.url)

        code, text = anyio.run(setup.doctor_within, 30.0)

    assert code == 1
    assert f"FAIL server: {server.url}/healthz answered with more than {remote.MAX_HEALTH_BYTES} bytes" in text
    assert server.sent < FLOOD_BYTES // 2  # doctor hung up: the rest was never sent


def test_a_handshake_answer_that_never_ends_fails_the_handshake_check_by_its_deadline(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "HANDSHAKE_DEADLINE", 0.5)
    with hostile(healthz_then(drip)) as server:
        setup.point_at(server.url)

        code, text = anyio.run(setup.doctor_within, 10.0)

    assert code == 1
    assert _line(text, "server").startswith("ok ")
    line = _line(text, "handshake")
    assert line.startswith(f"FAIL handshake: {server.url} did not finish the channel handshake within 0.5 s")
    assert "not checked (the handshake failed)" in _line(text, "grant")


def test_another_web_service_at_the_server_url_fails_the_handshake_with_a_clear_sentence(setup: Setup) -> None:
    def ok(server: Hostile, conn: socket.socket) -> None:  # 200 to everything, as a default web site answers
        conn.sendall(_answer(200, b'{"status":"ok"}'))

    with hostile(healthz_then(ok)) as server:
        setup.point_at(server.url)

        code, text = setup.doctor()

    assert code == 1
    line = _line(text, "handshake")
    assert line.startswith(
        f"FAIL handshake: the channel handshake with the memory server at {server.url} failed: its answer was corrupt "
        "or forged"
    )
    assert "fix: start the server (memory-server serve), or correct server_url in" in line
    assert "not checked (the handshake failed)" in _line(text, "grant")
    assert text.endswith("1 check failed\n")  # it ends with the count, not with an empty error


def test_a_proxy_named_in_the_environment_is_not_used_to_reach_the_server(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The channel never goes through HTTP_PROXY; a /healthz that did would fail here while every command works.
    with hostile(lambda server, conn, head: conn.sendall(_answer(502, b'{"error":"bad gateway"}'))) as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)

        code, text = setup.doctor()

    assert code == 0, text
    assert _line(text, "server").startswith(f"ok   server: {setup.server.url} is up")
    assert _line(text, "grant").startswith("ok ")
    assert proxy.heads == []


def test_the_grant_check_leaves_the_devices_recorded_pull_unchanged(setup: Setup) -> None:
    service = setup.server.service
    assert service is not None
    alice = CallerContext("alice", "SHA256:alice", {INDEX: "rw"}, INDEX, "rw")
    service.write(alice, "first note", path="memory/notes.md")
    SyncService(service).changes(alice, 0)  # alice's laptop pulled up to revision 1
    service.write(alice, "second note", path="memory/notes.md")  # revision 2: not pulled yet

    def pulls() -> list[CallerSync]:
        return [entry for entry in service.indexes.get(INDEX).mirror.sync_callers() if entry.caller == "alice"]

    before = pulls()
    assert [entry.pulled_revision for entry in before] == [1]

    code, text = setup.doctor()

    assert pulls() == before
    assert code == 0, text
    assert _line(text, "grant").startswith(f"ok   grant: device alice may use index {INDEX}, read and write")


def test_a_read_only_grant_is_named_as_such(setup: Setup) -> None:
    setup.server.stop()
    (setup.server.keys_dir / "callers.toml").unlink()
    setup.server.grants["alice"] = {INDEX: "r"}
    setup.server.admit("alice", read_private_key(setup.home / DEVICE_KEY_FILE).public)
    setup.server.start()

    code, text = setup.doctor()

    assert code == 0, text
    assert _line(text, "grant").startswith(
        f"ok   grant: device alice may use index {INDEX}, read only: the server refuses this device's changes"
    )


# Which index: the one Claude Code's registered server runs with. ---------------------------------------------


def test_the_index_claude_codes_server_names_is_the_one_checked_not_proxy_tomls(setup: Setup) -> None:
    install(setup.project, "other")  # .mcp.json: memory-proxy run --index other; proxy.toml still names team

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "grant")
    mcp = setup.project / ".mcp.json"
    assert line.startswith(
        f"FAIL grant: device alice may not use index other (as Claude Code's MCP server in {mcp} names it)"
    )
    assert "fix: on the server: memory-server callers grant alice other=rw, or name a granted index: " in line
    assert "memory-proxy install-claude --index NAME" in line
    assert text.count("grant:") == 1


def test_an_index_named_only_by_claude_codes_server_is_checked_as_the_readme_sets_it_up(setup: Setup) -> None:
    setup.point_at(setup.server.url, index=None)  # `init` without --index, then `install-claude --index team`
    install(setup.project, INDEX)

    code, text = setup.doctor()

    assert code == 0, text
    by_claude = f"(as Claude Code's MCP server in {setup.project / '.mcp.json'} names it)"
    assert _line(text, "grant").startswith(
        f"ok   grant: device alice may use index {INDEX}, read and write {by_claude}"
    )
    assert _line(text, "file sync").startswith("warn file sync: no memory-proxy is watching")


def test_an_index_given_to_doctor_that_differs_from_claude_codes_is_checked_beside_it(setup: Setup) -> None:
    install(setup.project, INDEX)

    code, text = setup.doctor(index="other")

    assert code == 1
    grants = [line for line in text.splitlines() if line[5:].startswith("grant:")]
    by_claude = f"(as Claude Code's MCP server in {setup.project / '.mcp.json'} names it)"
    assert grants == [
        f"ok   grant: device alice may use index {INDEX}, read and write {by_claude}",
        "FAIL grant: device alice may not use index other (from --index)",
    ]


def test_a_registered_index_that_is_not_a_valid_name_is_named_without_repeating_it(setup: Setup) -> None:
    secret = "memory-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIsecret"
    mcp = setup.project / ".mcp.json"
    entry = {"type": "stdio", "command": "memory-proxy", "args": ["run", "--index", secret]}
    mcp.write_text(json.dumps({"mcpServers": {"memory": entry}}), "utf-8")

    code, text = setup.doctor()

    assert code == 1
    line = _line(text, "grant")
    assert line.startswith("FAIL grant: invalid index name")
    assert f"(as Claude Code's MCP server in {mcp} names it)" in line
    assert "fix: memory-proxy install-claude --index NAME" in line
    assert "secret" not in text and "AAAA" not in text


@pytest.mark.parametrize(
    ("entry", "index"),
    [
        ({"args": ["run"]}, None),
        ({"args": ["run", "--index", "a", "--project", "/p"]}, "a"),
        ({"args": ["run", "--index=a", "--index", "b"]}, "b"),  # the last wins, as argparse reads them
        ({"args": ["run"], "env": {"MEMORY_INDEX": "c"}}, "c"),
        ({"args": ["run", "--index", "a"], "env": {"MEMORY_INDEX": "c"}}, "a"),
        ({"args": ["run", "--index", "${TEAM_INDEX}"]}, "t"),
        ({"args": ["run", "--index", "${UNSET:-fallback}"]}, "fallback"),
        ({"args": "run --index a"}, None),
    ],
)
def test_the_index_of_a_registered_entry_is_read_as_memory_proxy_run_reads_it(
    entry: dict[str, object], index: str | None
) -> None:
    assert entry_index(entry, {"TEAM_INDEX": "t"}) == index


# Claude Code's files that do not read. ---------------------------------------------------------------------


def test_a_settings_file_that_is_not_json_is_named_with_its_own_error(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    install(project, None)
    settings = project / ".claude" / "settings.json"
    settings.write_text('{\n  "hooks": {,\n}\n', "utf-8")

    result = check_claude(project, {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")})

    assert result.ok is False
    assert result.line == (
        f"Claude Code: {settings} is not valid JSON (line 2, column 13); no SessionStart hook for {project}"
    )
    assert result.fix == f"correct {settings}, then run: memory-proxy install-claude --project {project}"


def test_a_settings_file_install_claude_would_refuse_is_named_with_its_refusal(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    install(project, None)
    settings = project / ".claude" / "settings.json"
    settings.write_text('{"hooks": []}', "utf-8")  # JSON, but not the hooks' documented shape

    result = check_claude(project, {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")})

    assert result.ok is False
    assert result.line == (
        f"Claude Code: no SessionStart hook for {project}, and install-claude would refuse {settings}: "
        '"hooks" must be an object of event names'
    )
    assert result.fix == f"correct {settings}, then run: memory-proxy install-claude --project {project}"


def test_a_broken_settings_file_beside_a_sound_set_up_is_a_warning(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    install(project, None)
    user_settings = tmp_path / "claude" / "settings.json"
    user_settings.parent.mkdir()
    user_settings.write_text("[1, 2", "utf-8")

    result = check_claude(project, {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")})

    assert result.ok is True and result.warning
    assert result.line.startswith("Claude Code: MCP server and hooks found, but ")
    assert f"{user_settings} is not valid JSON (line 1, column 6)" in result.line
    assert result.fix == f"correct {user_settings}"
