"""The container tier: the image built from the working tree, run with the shipped compose.yaml by a real engine.

`make test-container` (and `.ci/run`) makes sure an engine answers (scripts/container/engine.sh) and runs these;
`make test` leaves them out (the `container` marker). The image is built once per run by
scripts/container/build-image.py, unless MEMORY_TEST_IMAGE names one already built. What the run measured (image
size, time to healthy, resident memory, stop time) is printed at the end, under "container facts".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import REPO
from tests.container.deployment import run

FACTS: dict[str, str] = {}
TAG = "memory-server:container-tier"


def record(name: str, value: str) -> None:
    """A measured fact for the end-of-run summary."""
    FACTS[name] = value


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FACTS:
        terminalreporter.section("container facts")
        for name, value in FACTS.items():
            terminalreporter.write_line(f"{name}: {value}")


@pytest.fixture(scope="session")
def engine() -> None:
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        pytest.fail(
            "no Docker engine answers: run `make test-container`, which starts one (scripts/container/engine.sh)"
        )


@pytest.fixture(scope="session")
def image(engine: None) -> Iterator[str]:
    """The image of the working tree, built as build-image.py builds it (also without a container registry)."""
    given = os.environ.get("MEMORY_TEST_IMAGE")
    if given:
        yield given
        return
    started = time.monotonic()
    subprocess.run([sys.executable, str(REPO / "scripts/container/build-image.py"), "--tag", TAG], check=True)
    record("image build", f"{time.monotonic() - started:.0f} s")
    size = int(run(["docker", "image", "inspect", "--format", "{{.Size}}", TAG]).strip())
    record("image size", f"{size / 1e6:.0f} MB")
    layers = run(["docker", "history", "--format", "{{.Size}}\t{{.CreatedBy}}", TAG]).splitlines()
    biggest = [line[:90] for line in layers if not line.startswith("0B")]
    record("image layers", "; ".join(biggest))
    yield TAG
