"""Where scripts/install.sh takes torch from (scripts/torch-index.sh): never PyPI's Linux build, which is CUDA's and
pulls several GB. Run with a fresh venv's real pip, this machine's pip settings switched off, and a local folder
holding a small wheel that calls itself torch 2.13.0+cpu."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "torch-index.sh"
CPU_INDEX = ["--index-url", "https://download.pytorch.org/whl/cpu"]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the CPU index is chosen on Linux only")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv


def stub_wheel(folder: Path) -> Path:
    """A valid wheel of a distribution named torch, version 2.13.0+cpu, holding nothing else."""
    info = "torch-2.13.0+cpu.dist-info"
    files = {
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    )
    path = folder / "torch-2.13.0+cpu-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return path


def choose(venv: Path, **env: str) -> list[str]:
    settings = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "TORCH_INDEX_URL"))}
    settings |= {"PIP_CONFIG_FILE": os.devnull, **env}
    done = subprocess.run(
        [str(SCRIPT), str(venv)], capture_output=True, text=True, env=settings, timeout=300, check=True
    )
    return done.stdout.split()


def test_torch_comes_from_the_cpu_index_when_pips_settings_hold_no_cpu_build(fresh_venv, tmp_path):
    assert choose(fresh_venv) == CPU_INDEX
    assert choose(fresh_venv, PIP_FIND_LINKS=str(tmp_path)) == CPU_INDEX  # an empty folder holds none


def test_a_cpu_build_in_pips_find_links_is_used_as_it_is(fresh_venv, tmp_path):
    stub_wheel(tmp_path)
    assert choose(fresh_venv, PIP_FIND_LINKS=str(tmp_path)) == []


def test_torch_index_url_decides_when_set_and_empty_means_pips_settings_alone(fresh_venv):
    assert choose(fresh_venv, TORCH_INDEX_URL="") == []
    assert choose(fresh_venv, TORCH_INDEX_URL="https://example.test/simple") == [
        "--index-url",
        "https://example.test/simple",
    ]
