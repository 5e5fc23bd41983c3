"""The laptop side as users install it: `pipx install` and `uv tool install` of this checkout on the Pythons laptops
run (3.12 and 3.13; the server stays on 3.11 with torch), and a laptop whose proxy runs on 3.13 sharing memory with
one on this checkout's 3.11, through a real server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.mcp_support import structured
from tests.sync_support import Laptop, ProductServer, eventually, search_paths

TEAM = "team"
INSTALL_TIMEOUT = 600.0
# Laptops run whatever Python their OS ships; these machines keep the newer ones under pyenv.
PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def find_python(version: str) -> Path:
    """A working `python3.X` from pyenv or PATH (pyenv's shims on PATH may not run); fails, never skips, without."""
    candidates = [*sorted(PYENV_VERSIONS.glob(f"{version}.*/bin/python{version}"), reverse=True)]
    on_path = shutil.which(f"python{version}")
    candidates += [Path(on_path)] if on_path else []
    for candidate in candidates:
        if subprocess.run([candidate, "-c", ""], capture_output=True, check=False).returncode == 0:
            return candidate
    pytest.fail(f"Python {version} is not installed (PATH or {PYENV_VERSIONS}): `pyenv install {version}`")


def tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def install(command: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def pipx_proxy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pipx install` of this checkout with Python 3.13: the laptop's memory-proxy."""
    root = tmp_path_factory.mktemp("pipx")
    env = {"PIPX_HOME": str(root / "home"), "PIPX_BIN_DIR": str(root / "bin"), "PIPX_MAN_DIR": str(root / "man")}
    install([tool("pipx"), "install", "--python", str(find_python("3.13")), str(REPO)], env)
    return root / "bin" / "memory-proxy"


@pytest.fixture(scope="module")
def uv_proxy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`uv tool install` of this checkout with Python 3.12."""
    root = tmp_path_factory.mktemp("uv")
    env = {
        "UV_TOOL_DIR": str(root / "tools"),
        "UV_TOOL_BIN_DIR": str(root / "bin"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NATIVE_TLS": "1",  # the system's CA bundle, as pip uses it here
    }
    install([tool("uv"), "tool", "install", "--python", str(find_python("3.12")), str(REPO)], env)
    return root / "bin" / "memory-proxy"


def interpreter_of(executable: Path) -> str:
    """The `X.Y` of the Python a console script runs on."""
    shebang = executable.read_text().splitlines()[0].removeprefix("#!").split()[0]
    done = subprocess.run(
        [shebang, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_pipx_installs_the_laptop_side_on_python_3_13_without_the_server_dependencies(pipx_proxy):
    assert interpreter_of(pipx_proxy) == "3.13"
    shebang = pipx_proxy.read_text().splitlines()[0].removeprefix("#!").split()[0]
    imports = "import client_proxy.cli, importlib.util as u; print(u.find_spec('torch') is None)"
    done = subprocess.run([shebang, "-c", imports], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"  # a laptop gets no torch
    page = "from client_proxy.ui.http import STATIC, static_file as f; print(all(f(n) for n, _ in STATIC.values()))"
    done = subprocess.run([shebang, "-c", page], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "True", done.stderr  # the memory browser's page is package data in the install
    assert "memory-proxy" in subprocess.run([pipx_proxy, "--help"], capture_output=True, text=True).stdout


def test_uv_tool_installs_the_laptop_side_on_python_3_12(uv_proxy):
    assert interpreter_of(uv_proxy) == "3.12"
    help_text = subprocess.run([uv_proxy, "--help"], capture_output=True, text=True, check=True).stdout
    assert "run" in help_text and "init" in help_text


@pytest.fixture
def server(tmp_path: Path, local_embedder: object) -> Iterator[ProductServer]:
    running = ProductServer(tmp_path / "server", local_embedder, {"alice": {TEAM: "rw"}, "bob": {TEAM: "rw"}})  # type: ignore[arg-type]
    yield running
    running.stop()


@pytest.mark.model
@pytest.mark.anyio
async def test_a_laptop_on_python_3_13_and_one_on_3_11_share_writes_and_file_edits(tmp_path, server, pipx_proxy):
    alice = Laptop(tmp_path / "alice", server, "alice", TEAM)  # this checkout's proxy, Python 3.11
    bob = Laptop(tmp_path / "bob", server, "bob", TEAM, proxy=pipx_proxy)  # pipx, Python 3.13
    server.start()
    async with alice.running() as a, bob.running() as b:
        written = structured(await a.call_tool("memory_write", {"content": "Releases are cut on Thursdays."}))
        assert written["path"] in await search_paths(b, "which day are releases cut")
        bob.write("memory/oncall.md", "# On call\n\nThe pager rotates every Monday at 10:00.\n")
        await eventually(lambda: alice.read("memory/oncall.md") == bob.read("memory/oncall.md"), "alice's copy")
        alice.write("memory/oncall.md", "# On call\n\nThe pager rotates every Tuesday at 10:00.\n")
        await eventually(lambda: "Tuesday" in (bob.read("memory/oncall.md") or ""), "bob's copy of alice's edit")
        assert "memory/oncall.md" in await search_paths(b, "when does the pager rotate")
