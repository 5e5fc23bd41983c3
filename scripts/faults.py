#!/usr/bin/env python3
"""The seeded fault-injection loop (`make test-faults`): a real server and two real proxies under a random workload
with faults at random points, then the invariants (docs/faults.md).

    scripts/faults.py                  # the fixed CI seeds
    scripts/faults.py --seeds 30       # seeds 1..30 (a longer run by hand)
    scripts/faults.py --seed 17        # replay one seed exactly
    scripts/faults.py --steps 20       # more steps per seed

Prints a line per seed, then a table: runs, faults by kind, violations. Exits 1 when any seed broke an invariant,
after printing the command that replays it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.faults.kinds import KINDS  # noqa: E402
from tests.faults.loop import SeedReport, run_seed  # noqa: E402

# `make test-faults`: about three minutes on two cores. Together these draw every kind of fault (as root); seed 2
# found the unreadable vector table (server/index/store.py).
CI_SEEDS = (2, 5, 6, 7)
STEPS = 10
DISK_SIZE = "48m"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--seeds", type=int, metavar="N", help="run seeds 1..N")
    group.add_argument("--seed", type=int, metavar="S", help="replay seed S")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps per seed (default {STEPS})")
    parser.add_argument("--keep", action="store_true", help="keep each seed's folder (logs, files) for a look")
    parser.add_argument("--journal", action="store_true", help="print every seed's steps, not only a failing one's")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else list(range(1, args.seeds + 1)) if args.seeds else list(CI_SEEDS)
    reports = []
    for seed in seeds:
        with _folder(seed, args.keep) as (folder, kept), _small_disk(folder / "disk") as disk:
            report = run_seed(seed, folder, steps=args.steps, disk=disk)
            kept.append(bool(report.violations))  # a failing seed's logs and files stay for a look
        reports.append(report)
        faults = ", ".join(f"{n} {kind}" for kind, n in sorted(report.faults.items()))
        print(f"seed {seed}: {report.steps} steps, {report.seconds:.0f} s; faults: {faults or 'none'}", flush=True)
        if report.violations or args.seed is not None or args.journal:
            for line in report.journal:
                print(f"    {line}")
            for violation in report.violations:
                print(f"  VIOLATION {violation}")
        if report.violations:
            print(
                f"  replay: make test-faults SEED={seed} STEPS={args.steps}  (or scripts/faults.py --seed {seed} "
                f"--steps {args.steps} --keep)",
                flush=True,
            )
    print(table(reports))
    return 1 if any(report.violations for report in reports) else 0


def table(reports: list[SeedReport]) -> str:
    faults: Counter[str] = Counter()
    fired: Counter[str] = Counter()
    for report in reports:
        faults.update(report.faults)
        fired.update(report.fired)
    broken = [report.seed for report in reports if report.violations]
    rows = [
        ("runs (seeds)", str(len(reports))),
        ("steps", str(sum(r.steps for r in reports))),
        ("seconds", f"{sum(r.seconds for r in reports):.0f}"),
        *((f"faults: {kind}", f"{faults[kind]} ({fired[kind]} struck)") for kind in KINDS),
        ("faults: all", str(sum(faults.values()))),
        ("violations", str(sum(len(r.violations) for r in reports))),
        ("seeds with violations", ", ".join(map(str, broken)) or "none"),
    ]
    skipped = sorted({reason for report in reports for reason in report.skipped})
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    return "\n".join(["", *lines, *(f"skipped {reason}" for reason in skipped)])


@contextmanager
def _folder(seed: int, keep: bool) -> Iterator[tuple[Path, list[bool]]]:
    folder = Path(tempfile.mkdtemp(prefix=f"faults-seed{seed}-"))
    kept: list[bool] = [keep]
    try:
        yield folder, kept
    finally:
        if any(kept):
            print(f"  kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _small_disk(where: Path) -> Iterator[Path | None]:
    """A small tmpfs for the server's data (root only; None elsewhere: the disk-full fault is then skipped)."""
    where.mkdir()
    if os.geteuid() != 0:
        yield None
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(where)], check=False)
    if mounted.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
