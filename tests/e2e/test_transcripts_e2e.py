"""Session transcripts end to end: two laptops' real `memory-proxy --transcripts` processes read Claude Code session
files (written in Claude Code's format into each laptop's own `CLAUDE_CONFIG_DIR`), redact them and upload them to
one real server (channel, MCP, the real embedding model); each laptop finds the other's sessions by search. What
the server stored is read from its disk: no planted secret may be in it, and every look-alike must be."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.sync_support import SETTLE, Laptop, ProductServer, search_paths
from tests.transcript_fixtures import append_session, assistant_lines, at, project_folder, user_line, write_session

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

TEAM = "team"
CALLERS = {"alice": {TEAM: "rw"}, "bob": {TEAM: "rw"}}
ALICE_SESSION = "0a1b2c3d-1111-4aaa-8bbb-123456789abc"
BOB_SESSION = "9f8e7d6c-2222-4ccc-9ddd-cba987654321"


def planted_secrets() -> dict[str, str]:
    """Format-correct fakes, built at run time (never a literal token in the repo), by the kind each must become."""
    return {
        "aws-key": "AKIA" + "QX7Z2M4N6P8R1T3V",
        "github-token": "ghp_" + "a1B2c3D4e5F6" * 3,
        "anthropic-key": "sk-ant-api03-" + "Zk9xQ2mW7pL4vN8r" * 6,
        "private-key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "password": "hunter2-" + "Correct7Horse",
        "bearer-token": "eyJhbGciOiJIUzI1NiJ9" + "Q2xhdWRlQ29kZVRva2Vu",
    }


def secret_lines(secrets: dict[str, str]) -> list[str]:
    return [
        f"export AWS_ACCESS_KEY_ID={secrets['aws-key']}",
        f"git remote set-url origin https://{secrets['github-token']}@github.com/acme/app.git",
        f"ANTHROPIC_API_KEY={secrets['anthropic-key']}",
        secrets["private-key"],
        f"DB_PASSWORD={secrets['password']}",
        f"curl -H 'Authorization: Bearer {secrets['bearer-token']}' https://api.acme.dev/v1/me",
    ]


LOOKALIKES = [
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed the race",
    "sha256 53aa511758d9d1ae47ec0e0c7d1fd1cb4e3f6e1e1c5c0d2b5e4d8a1f0c28d9db",
    "request id 123e4567-e89b-12d3-a456-426614174000 timed out",
    "max_tokens = 254 and input_tokens: 1200",
    "we moved from scikit-learn to sk-learn-lite",
]


def conversation(project: Path, session: str, turns: int, topic: str, extra: list[str] | None = None) -> list[Any]:
    lines: list[Any] = []
    for n in range(turns):
        said = f"Turn {n}: how should we handle {topic}?"
        if extra and n < len(extra):
            said += "\n" + extra[n]
        lines.append(user_line(said, cwd=str(project), ts=at(2 * n), session=session))
        lines += assistant_lines(f"For {topic}, step {n} is done.", cwd=str(project), ts=at(2 * n + 1), session=session)
    return lines


@pytest.fixture
def server(tmp_path: Path, local_embedder: object) -> Iterator[ProductServer]:
    running = ProductServer(tmp_path / "server", local_embedder, CALLERS)  # type: ignore[arg-type]
    yield running
    running.stop()


async def searchable(client: Any, query: str, folder: str) -> None:
    """Wait, bounded, until `query` finds a transcript under `folder` first (uploads are indexed as they land)."""
    with anyio.fail_after(SETTLE):
        while not (found := await search_paths(client, query, sources=["sessions"])) or not found[0].startswith(folder):
            await anyio.sleep(0.2)


def stored(server: ProductServer, caller: str) -> str:
    """The server's copies of `caller`'s transcripts, joined (read through its file store, on either backend)."""
    assert server.service is not None
    store = server.service.indexes.get(TEAM).mirror
    return "".join(server.text(TEAM, state.path) or "" for state in store.list(f"sessions/{caller}/"))


async def test_two_laptops_sessions_are_redacted_uploaded_kept_growing_and_searchable_from_each_other(tmp_path, server):
    alice = Laptop(tmp_path / "alice", server, "alice", TEAM, extra_args=("--transcripts",))
    bob = Laptop(tmp_path / "bob", server, "bob", TEAM, extra_args=("--transcripts",))
    server.start()
    secrets = planted_secrets()
    # 21 turns: over the 40 new lines that send a session at once (a quiet one waits a minute).
    alice_lines = conversation(
        alice.project, ALICE_SESSION, 21, "the kafka consumer lag", secret_lines(secrets) + LOOKALIKES
    )
    alice_file = write_session(project_folder(alice.claude_home, alice.project), ALICE_SESSION, alice_lines)
    write_session(
        project_folder(bob.claude_home, bob.project),
        BOB_SESSION,
        conversation(bob.project, BOB_SESSION, 21, "nginx buffering of event streams"),
    )
    async with alice.running() as alice_client, bob.running() as bob_client:
        await searchable(bob_client, "kafka consumer lag", "sessions/alice/")
        await searchable(alice_client, "nginx buffering of event streams", "sessions/bob/")
        assert await search_paths(alice_client, "nginx buffering of event streams", sources=["memory"]) == []

        alice_lines += conversation(alice.project, ALICE_SESSION, 21, "the zookeeper migration")
        append_session(alice_file, alice_lines)  # the session grows while the proxy runs
        await searchable(bob_client, "zookeeper migration", "sessions/alice/")

        alice_lines += conversation(alice.project, ALICE_SESSION, 1, "the final words")
        append_session(alice_file, alice_lines)  # two lines: not enough to send until the proxy stops
    assert "the final words" in stored(server, "alice")  # a session's final state always arrives

    text = stored(server, "alice")
    for kind, secret in secrets.items():
        for piece in secret.splitlines():
            if len(piece) > 12 and not piece.startswith("-----"):
                assert piece not in text, f"a {kind} reached the server"
        assert f"[redacted:{kind}]" in text
    for lookalike in LOOKALIKES:
        assert lookalike in text, f"look-alike redacted: {lookalike}"
    for laptop in (alice, bob):  # transcripts never come down: both laptops synced, and neither got a file
        assert laptop.files() == {} and not (laptop.project / "sessions").exists()

    params = alice.params()
    shown = subprocess.run(
        [params.command, "status", "--project", str(alice.project), "--json"],
        env=params.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(shown.stdout)["transcripts"]
    assert report["sessions_sent"] == 1 and report["redacted"] == len(secrets) and report["last_upload"]
