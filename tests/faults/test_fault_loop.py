"""The seeded fault-injection loop as a test tier (`pytest -m faults`; `make test-faults` runs the fixed seeds
with a summary table through scripts/faults.py). Excluded from `make test`, like the container and browser tiers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from syncproto.faults import parse_points
from tests.faults.ledger import Ledger, invented_lines
from tests.faults.loop import run_seed

pytestmark = pytest.mark.faults
SEED = int(os.environ.get("FAULTS_SEED", "1"))


def test_a_seed_of_faults_breaks_no_invariant(tmp_path: Path) -> None:
    report = run_seed(SEED, tmp_path, steps=8, disk=None)
    assert report.steps == 8
    assert sum(report.faults.values()) > 0
    assert report.violations == [], (
        "\n".join([*report.journal, *report.violations])
        + f"\nreplay: make test-faults SEED={SEED} STEPS=8 (or scripts/faults.py --seed {SEED} --steps 8 --keep)"
    )


def test_fault_points_are_named_with_the_hit_that_kills() -> None:
    assert parse_points("mirror.write.published@3, proxy.pull.written,,bad@x") == {
        "mirror.write.published": 3,
        "proxy.pull.written": 1,
        "bad": 1,
    }
    assert parse_points("") == {}


def test_a_line_nobody_wrote_is_a_violation() -> None:
    ledger = Ledger(seed=5)
    ledger.record("alice", "memory/a.md", "# a\n\n- one zq5x1\n", step=1, token="zq5x1")
    assert invented_lines(ledger, {"memory/a.md": "# a\n\n- one zq5x1\n"}) == []
    assert invented_lines(ledger, {"memory/a.md": "# a\n- one zq5x1 garbled\n"}) == [
        "memory/a.md: '- one zq5x1 garbled'"
    ]
