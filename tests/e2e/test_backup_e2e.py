"""Backup and restore while serving: a real server under a write burst, `memory-server backup` and `restore` as the
operator runs them (subprocesses), a server started on the restored folder with the same keys, and a real
`memory-proxy` laptop that reconnects to it. And a backup SIGKILLed at each moment of its work never leaves a
partial archive."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from server.backup.restore import verify_archive
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from tests.conftest import REPO
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer, eventually

pytestmark = pytest.mark.anyio

TEAM = "team"
CALLERS = {"alice": {TEAM: "rw"}, "writer": {TEAM: "rw"}}
WRITER = CallerContext("writer", "SHA256:writer", {TEAM: "rw"}, TEAM, "rw")
NOTES = {f"memory/notes/{n}.md": f"# Note {n}\n\nThe staging host {n} is kestrel-{n}; deploys are blue-green.\n"
         for n in range(8)}  # fmt: skip
FILES = 80
QUERIES = ("kestrel staging host", "falcon cache warming", "burst entry 12", "blue-green deploys")


MEMORY_SERVER = str(Path(sys.executable).parent / "memory-server")  # the console script, as an operator runs it


def memory_server(*args: str) -> subprocess.CompletedProcess[str]:
    command = [MEMORY_SERVER, *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


class Burst:
    """The writer caller writing new files through the serving server's service as fast as it can."""

    def __init__(self, service: MemoryService) -> None:
        self.service, self.written, self._stop = service, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            number = self.written
            text = f"# Burst {number}\n\nburst entry {number}: the falcon cache warms in {number} s.\n"
            path = f"memory/burst/{number}.md"
            self.service.write(WRITER, text, path=path, mode="replace", expected_hash="absent")
            self.written += 1

    def __enter__(self) -> Burst:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def answers(service: MemoryService) -> list[list[dict[str, Any]]]:
    """Every hit, every field (paths, lines, scores, snippets, who and when), for each query."""
    return [[hit.model_dump() for hit in service.search(WRITER, query, max_results=10).hits] for query in QUERIES]


def archived_files(archive: Path) -> dict[str, int]:
    prefix = f"indexes/{TEAM}/files/"
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix(prefix): m.size for m in tar if m.name.startswith(prefix)}


async def test_a_backup_taken_during_a_write_burst_restores_the_same_answers_and_the_laptop_reconnects_quietly(
    tmp_path: Path,
) -> None:
    server = ProductServer(tmp_path / "server", HashingEmbedder(), CALLERS)
    alice = Laptop(tmp_path / "alice", server, "alice", TEAM)
    server.start()
    try:
        for path, text in NOTES.items():
            alice.write(path, text)
        with alice.bare():  # alice's notes synced before the backup; then her laptop is shut
            await eventually(lambda: all(server.text(TEAM, p) == t for p, t in NOTES.items()), "alice's notes")
        pushes = (alice.read_log() or "").count("sync: pushed")
        assert server.service is not None and pushes >= 1
        mirror = server.service.indexes.get(TEAM).mirror
        pushed_before = {c.caller: c.pushed_revision for c in mirror.sync_callers()}["alice"]

        archive = tmp_path / "backups" / "memory.tar"
        archive.parent.mkdir()
        with Burst(server.service) as burst:
            await eventually(lambda: burst.written >= 20, "the write burst under way")
            started = mirror.revision()
            folders = ("--data-dir", str(server.data_dir), "--keys-dir", str(server.keys_dir))
            done = await anyio.to_thread.run_sync(lambda: memory_server(*folders, "backup", str(archive)))
            ended = mirror.revision()
        assert done.returncode == 0, done.stderr
        revision = verify_archive(archive)["indexes"][TEAM]["revision"]
        assert started < revision < ended  # taken in the middle of the burst, not before or after it

        # The serving server, brought back to the archive's point: the burst files written after it are deleted.
        kept = archived_files(archive)
        for state in mirror.list("memory/burst/"):
            if state.path not in kept:
                server.service.delete(WRITER, state.path)
        assert {s.path: s.size for s in mirror.list()} == kept
        before = answers(server.service)
        port, public = server.port, server.key.public
        server.stop()

        restored_dir = tmp_path / "restored"
        done = memory_server("--data-dir", str(restored_dir / "data"), "--keys-dir", str(restored_dir / "keys"),
                             "restore", str(archive))  # fmt: skip
        assert done.returncode == 0, done.stderr
        restored = ProductServer(restored_dir, HashingEmbedder(), CALLERS)
        assert restored.key.public == public  # the identity every laptop pinned
        restored.port = port
        restored.start()
        try:
            assert restored.service is not None
            assert answers(restored.service) == before and all(before)

            burst_files = {p for p in kept if p.startswith("memory/burst/")}
            with alice.bare():  # alice's laptop comes back to the restored server
                await eventually(lambda: burst_files <= set(alice.files()), "the archived burst files on alice's")
                await eventually(lambda: f"up to revision {revision}" in (alice.read_log() or ""), "alice's pull")
            restored_mirror = restored.service.indexes.get(TEAM).mirror
            log = alice.read_log() or ""
            assert log.count("sync: pushed") == pushes  # nothing uploaded again
            assert {c.caller: c.pushed_revision for c in restored_mirror.sync_callers()}["alice"] == pushed_before
            assert [v for v in restored_mirror.history.versions(limit=1000) if v.revision > revision] == []
            assert not list(alice.project.rglob("*.conflict-*")) and "server's history restarted" not in log
            assert set(alice.files()) == set(kept)
        finally:
            restored.stop()
    finally:
        server.stop()


def test_a_backup_killed_at_any_moment_of_its_work_leaves_the_old_archive_whole(tmp_path: Path) -> None:
    data, keys = tmp_path / "data", tmp_path / "keys"
    service = MemoryService(data, HashingEmbedder())
    try:
        for n in range(FILES):
            text = f"# File {n}\n\n" + f"line {n} of a long file about kestrel and falcon caches.\n" * 100
            service.write(WRITER, text, path=f"memory/f/{n}.md", mode="replace", expected_hash="absent")
    finally:
        service.close()
    archive = tmp_path / "memory.tar"
    command = [MEMORY_SERVER, "--data-dir", str(data), "--keys-dir", str(keys), "backup", str(archive)]
    assert memory_server(*command[1:]).returncode == 0
    size = archive.stat().st_size

    def archived(fraction: float) -> Callable[[Path], bool]:
        return lambda work: any(p.stat().st_size >= size * fraction for p in work.glob("archive-*.tmp"))

    moments: dict[str, Callable[[Path], bool]] = {
        "work folder made": lambda work: work.exists(),
        "state copied": lambda work: (work / "indexes" / "team" / "state.sqlite3").exists(),
        "index copied": lambda work: (work / "indexes" / "team" / "index.sqlite3").exists(),
        "archive begun": archived(0.0),
        "archive half written": archived(0.5),
        "archive nearly whole": archived(0.95),
    }
    killed = []
    for moment, reached in moments.items():
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
        if at_moment(process, tmp_path / f".memory.tar.{process.pid}.backup", reached):
            os.kill(process.pid, signal.SIGKILL)
            killed.append(moment)
        process.wait()
        assert verify_archive(archive)["indexes"]["team"]["files"] == FILES, f"killed when {moment}"
        names = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("data", "keys"))
        assert all(n == "memory.tar" or (n.startswith(".memory.tar.") and n.endswith(".backup")) for n in names)
    assert len(killed) >= 4, killed  # most moments caught before the run ended

    assert memory_server(*command[1:]).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "memory.tar"]  # the killed runs' leftovers cleared


def at_moment(process: subprocess.Popen[bytes], work: Path, reached: Callable[[Path], bool]) -> bool:
    """Wait (at most 30 s) until the backup `process` reaches a moment of its work; False when it ended first."""
    deadline = time.monotonic() + 30
    while process.poll() is None:
        with contextlib.suppress(FileNotFoundError):
            if reached(work):
                return True
        assert time.monotonic() < deadline, "the backup neither ended nor got there"
        time.sleep(0.0005)
    return False
