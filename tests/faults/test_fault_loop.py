"""The seeded fault-injection loop as a test tier (`pytest -m faults`; `make test-faults` runs the fixed seeds
with a summary table through scripts/faults.py). Excluded from `make test`, like the container and browser tiers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
