"""`memory-server serve`: the first run, what it prints, where it listens, and a clean stop on SIGTERM."""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

import httpx2
import numpy as np
import pytest

from server.cli.main import main
from server.cli.serve import bind, check_local_model, is_loopback, prepare_data_dir
from server.index.errors import EmbeddingError, InvalidArgumentError
from server.settings import Settings
from tests.conftest import REPO

WAIT = 60.0  # a cold start imports torch even when no model is loaded
# uvicorn shuts down gracefully, then re-raises the signal it caught, as a server stopped by it should.
STOPPED = (0, -signal.SIGTERM)
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


@contextmanager
def running(
    tmp_path: Path, *args: str, env: Mapping[str, str] = MappingProxyType({}), prefix: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str], list[str]]]:
    """`memory-server serve` as a real process (keyword-only: no model to load); stdout lines in a queue. `env`
    adds to or overrides its environment; `prefix` comes before the command (`bound_by_file_modes`)."""
    env = {
        **os.environ,
        "MEMORY_EMBEDDING_PROVIDERS": "none",
        "MEMORY_DATA_DIR": str(tmp_path / "data"),
        "MEMORY_KEYS_DIR": str(tmp_path / "keys"),
        "PYTHONUNBUFFERED": "1",
        "MEMORY_LOG_LEVEL": "info",
        **env,
    }
    env.pop("MEMORY_HOST", None)
    command = [*prefix, str(REPO / ".venv" / "bin" / "memory-server"), "serve", "--port", "0", *args]
    log = (tmp_path / "stderr.log").open("a")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield process, lines, seen
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT)
        log.close()
        assert process.stdout is not None
        process.stdout.close()


def until_listening(lines: queue.Queue[str], seen: list[str]) -> str:
    while True:
        line = lines.get(timeout=WAIT)
        seen.append(line)
        assert line, "the server exited before listening:\n" + "".join(seen)
        found = LISTENING.search(line)
        if found:
            return found.group(1)


def until_exit(lines: queue.Queue[str], seen: list[str]) -> str:
    """Everything the server printed before it exited; it must not have started listening."""
    while True:
        line = lines.get(timeout=WAIT)
        seen.append(line)
        assert not LISTENING.search(line), "the server started:\n" + "".join(seen)
        if not line:
            return "".join(seen)


def refused_start(tmp_path: Path, prefix: Sequence[str] = ()) -> str:
    """Start `serve`, expect exit code 2 before it listens; what it wrote on stderr."""
    with running(tmp_path, prefix=prefix) as (process, lines, seen):
        until_exit(lines, seen)
        assert process.wait(WAIT) == 2
    return (tmp_path / "stderr.log").read_text()


def bound_by_file_modes() -> list[str]:
    """A command prefix under which the server obeys file modes: root keeps its uid (the venv may live where only
    root may enter) but loses every capability, as the image's `cap_drop: ALL` does; anyone else runs as is."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root needs setpriv (util-linux) to drop the capabilities that ignore file modes")
    return [setpriv, "--bounding-set=-all"]


def test_the_first_run_creates_keys_and_data_prints_what_to_do_and_stops_cleanly(tmp_path):
    with running(tmp_path) as (process, lines, seen):
        url = until_listening(lines, seen)
        health = httpx2.get(url + "/healthz", timeout=WAIT)
        tunnel = httpx2.post(url + "/v1/tunnel", content=b"x", timeout=WAIT)
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) in STOPPED
    out = "".join(seen)
    log = (tmp_path / "stderr.log").read_text()
    assert "memory service closed" in log  # the lifespan ran to its end: calls in flight were waited for
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert tunnel.status_code == 401  # everything else needs the channel
    assert "first run" in out and re.search(r"server key:  memory-ed25519 \S+ memory-server", out)
    assert "memory-server callers add NAME --key 'memory-ed25519 ... LAPTOP' --grant INDEX=rw" in out
    key = tmp_path / "keys" / "server.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    fingerprint = re.search(r"key (SHA256:\S+)\)", out)
    assert fingerprint

    with running(tmp_path) as (process, lines, seen):
        until_listening(lines, seen)
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) in STOPPED
    again = "".join(seen)
    assert "first run" not in again and fingerprint.group(1) in again  # the same key: laptops stay pinned


def test_a_host_other_machines_can_reach_must_be_given_on_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_HOST", "0.0.0.0")
    code = main(["--data-dir", str(tmp_path / "data"), "--keys-dir", str(tmp_path / "keys"), "serve"])
    assert code == 2
    assert "serve --host 0.0.0.0" in capsys.readouterr().err
    assert not (tmp_path / "keys").exists() and not (tmp_path / "data").exists()


def test_loopback_addresses_are_recognised():
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.8.9.1", "::1", "localhost"))
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "192.168.1.4", "example.com"))


def test_host_and_port_come_from_the_environment_and_a_bad_port_is_a_configuration_error():
    assert (Settings.from_env({}).host, Settings.from_env({}).port) == ("127.0.0.1", 8765)
    settings = Settings.from_env({"MEMORY_HOST": "::1", "MEMORY_PORT": "9000"})
    assert (settings.host, settings.port) == ("::1", 9000)
    for bad in ("http", "-1", "70000", "８０"):
        with pytest.raises(InvalidArgumentError, match="MEMORY_PORT"):
            Settings.from_env({"MEMORY_PORT": bad})


def test_a_port_in_use_is_a_clear_error():
    taken = bind("127.0.0.1", 0)
    try:
        with pytest.raises(InvalidArgumentError, match=r"cannot listen on 127\.0\.0\.1"):
            bind("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


@pytest.mark.model
def test_a_machine_that_computes_the_local_model_otherwise_is_warned_of_at_start(local_embedder, monkeypatch, caplog):
    from server.index.embeddings import reference

    with caplog.at_level(logging.WARNING, logger="server.cli.serve"):
        check_local_model(local_embedder)
    assert caplog.records == []  # this machine gives the recorded vectors
    moved = np.roll(reference.recorded(local_embedder.model), 1, axis=0)
    monkeypatch.setattr(reference, "recorded", lambda model_id: moved)
    with caplog.at_level(logging.WARNING, logger="server.cli.serve"):
        check_local_model(local_embedder)  # warns, and raises nothing: the server still starts
    (record,) = caplog.records
    assert record.getMessage().startswith(f"{local_embedder.model} embeds its reference sentences at a cosine of ")
    assert record.getMessage().endswith("its vectors will not quite match those other machines made")


def test_a_local_model_failing_its_reference_sentences_at_start_is_warned_of_not_fatal(caplog):
    class Failing:
        model = "sentence-transformers/all-MiniLM-L6-v2"

        def embed(self, texts, *, kind="document"):
            raise EmbeddingError("the model failed: RuntimeError")

    with caplog.at_level(logging.WARNING, logger="server.cli.serve"):
        check_local_model(Failing())
    (record,) = caplog.records
    said = "the local model did not embed its reference sentences: the model failed: RuntimeError"
    assert record.getMessage() == said


def test_a_data_folder_the_server_cannot_write_stops_the_start_with_the_command_that_fixes_it(tmp_path):
    prefix = bound_by_file_modes()
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o500)  # as a bind mount another user owns, or a read-only one, is to the server
    err = refused_start(tmp_path, prefix)
    uid, gid = os.geteuid(), os.getegid()
    assert f"the data directory {data} is not writable by this server (uid {uid}): Permission denied" in err
    assert f"run: chown -R {uid}:{gid} {data}" in err
    assert not list(data.iterdir()) and not (tmp_path / "keys").exists()  # refused before anything was written


def test_a_callers_file_others_may_change_or_that_does_not_parse_stops_the_start(tmp_path):
    keys = tmp_path / "keys"
    assert main(["--keys-dir", str(keys), "keys", "init"]) == 0
    line = (keys / "server.pub").read_text().split()
    device = f"{line[0]} {line[1]} laptop"
    assert main(["--keys-dir", str(keys), "callers", "add", "alice", "--key", device, "--grant", "alice=rw"]) == 0
    callers = keys / "callers.toml"
    callers.chmod(0o664)
    err = refused_start(tmp_path)
    assert (
        f"refusing {callers}: mode 0664 lets group or others change who may connect; run: chmod go-w {callers}" in err
    )

    callers.chmod(0o644)
    callers.write_text("[callers.alice\nkeys = [")
    assert f"{callers}: not valid TOML" in refused_start(tmp_path)


def test_an_existing_data_folder_others_may_enter_is_made_0700_at_start(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)  # as `memory-server index` made it before, with a umask of 022
    with caplog.at_level(logging.WARNING, logger="server.cli.serve"):
        prepare_data_dir(data)
        prepare_data_dir(data)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    said = f"the data directory {data} was mode 0755, open to group or others; now 0700"
    assert [record.getMessage() for record in caplog.records] == [said]  # once: the second start finds it 0700


def test_a_data_folder_others_may_enter_that_the_server_may_not_tighten_stops_the_start(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving the folder to another user needs root")
    prefix = bound_by_file_modes()
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)  # writable by the server, but another user's to change
    os.chown(data, 10001, 10001)
    err = refused_start(tmp_path, prefix)
    assert f"refusing the data directory {data}: mode 0777 lets others replace the memory files in it" in err
    assert f"run: chmod 700 {data}" in err
    assert stat.S_IMODE(data.stat().st_mode) == 0o777


def test_a_data_folder_shared_through_a_group_the_server_may_not_tighten_is_served_with_a_warning(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving the folder to another user needs root")
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, 10001, os.getegid())  # as a Kubernetes fsGroup volume: another user's, the server's group writes
    data.chmod(0o2775)
    check = "import logging, pathlib, sys; from server.cli.serve import prepare_data_dir; " \
        "logging.basicConfig(); prepare_data_dir(pathlib.Path(sys.argv[1]))"  # fmt: skip
    done = subprocess.run(
        [*bound_by_file_modes(), sys.executable, "-c", check, str(data)],
        capture_output=True, text=True, timeout=WAIT, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"the data directory {data} is mode 2775, open to group or others" in done.stderr
    assert stat.S_IMODE(data.stat().st_mode) == 0o2775


def test_an_index_the_command_line_creates_is_in_folders_only_its_owner_may_enter(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDERS", "none")
    project = tmp_path / "project"
    project.mkdir()
    (project / "MEMORY.md").write_text("# Ops\n\nThe staging database is db-stg-04.\n")
    data = tmp_path / "data"
    umask = os.umask(0o022)
    try:
        assert main(["--data-dir", str(data), "index", str(project), "--index", "ops"]) == 0
    finally:
        os.umask(umask)
    for folder in (data, data / "indexes", data / "indexes" / "ops"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
