"""The fault points of the fault loop: named in MEMORY_FAULT_POINTS, each with the hit that kills; inert unset."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from syncproto.faults import FAULT_VARIABLE, parse_points
from tests.conftest import REPO

PROGRAM = (
    "from syncproto.faults import fault_point\nfor n in range(3):\n    fault_point('a.b')\n    print(n, flush=True)\n"
)


def test_fault_points_are_named_with_the_hit_that_kills() -> None:
    assert parse_points("mirror.write.published@3, proxy.pull.written,,bad@x") == {
        "mirror.write.published": 3,
        "proxy.pull.written": 1,
        "bad": 1,
    }
    assert parse_points("") == {}


def test_an_armed_point_kills_its_process_on_the_named_hit_and_an_unarmed_one_does_nothing() -> None:
    def run(points: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, FAULT_VARIABLE: points}
        return subprocess.run([sys.executable, "-c", PROGRAM], env=env, cwd=REPO, capture_output=True, text=True)

    armed = run("a.b@2")
    assert armed.returncode == -signal.SIGKILL and armed.stdout.split() == ["0"]
    other = run("x.y@1")
    assert other.returncode == 0 and other.stdout.split() == ["0", "1", "2"]
