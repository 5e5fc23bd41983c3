"""The container files: hadolint and the compose-spec schema accept them, and the build context holds the packages
pyproject.toml lists and none of the keys, data, settings or tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from docker.utils.build import exclude_paths
from setuptools import find_packages

from tests.conftest import REPO

BIN = Path(sys.executable).parent
NEVER_SENT = ("keys/", "backups/", "tests/", ".venv/", ".git/", ".data/", "bench/", "config/")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def shipped_packages() -> list[str]:
    """What pip installs into the image: the packages pyproject.toml's find-include lists."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return find_packages(str(REPO), include=config["tool"]["setuptools"]["packages"]["find"]["include"])


def build_context(root: Path) -> set[str]:
    """The files `docker build` sends from `root`, by docker-py's implementation of .dockerignore."""
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()[:1] not in ("", "#")
    ]
    return set(exclude_paths(str(root), patterns))


def test_the_dockerfile_passes_hadolint():
    result = run(str(BIN / "hadolint"), "--failure-threshold", "info", "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_yaml_matches_the_compose_spec():
    result = run(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_python_package_of_the_tree_is_shipped_except_tests_and_benchmarks():
    top_level = {path.parent.name for path in REPO.glob("*/__init__.py")}
    assert top_level - {"tests", "bench"} == {name for name in shipped_packages() if "." not in name}


def test_the_build_context_holds_every_shipped_module_and_no_keys_data_settings_or_tests(tmp_path):
    tree = tmp_path / "checkout"
    local = shutil.ignore_patterns(".venv", ".git", ".data", "*cache*", ".hypothesis", "__pycache__")
    shutil.copytree(REPO, tree, ignore=local)
    planted = ["keys/server.key", "keys/callers.toml", ".env", "config/memory-server.toml", ".data/server/x.sqlite3",
               ".venv/bin/python", ".git/config", "notes/secret.pem", "server/index.sqlite3",
               "backups/memory-2026-11-25.tar"]  # fmt: skip
    for relative in planted:
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_text("must not reach a build\n")
    context = build_context(tree)
    modules = {
        path.relative_to(REPO).as_posix()
        for package in shipped_packages()
        for path in (REPO / package.replace(".", "/")).glob("*.py")
    }
    assert modules and modules <= context
    assert {"pyproject.toml", "README.md", "scripts/install.sh", "Dockerfile"} <= context
    assert not [path for path in context if path.startswith(NEVER_SENT) or path in planted]
