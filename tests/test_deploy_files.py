"""The container files pass their linters: hadolint for the Dockerfile, the compose-spec schema for compose.yaml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_the_dockerfile_passes_hadolint():
    result = run(str(BIN / "hadolint"), "--failure-threshold", "info", "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_yaml_matches_the_compose_spec():
    result = run(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_build_context_keeps_keys_data_and_tests_out():
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert ignored[1] == "*"  # everything is excluded unless listed
    allowed = {line[1:].rstrip("/") for line in ignored if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "scripts/install.sh", "server", "channel", "client_proxy"}
