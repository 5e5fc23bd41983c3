"""One seed of the fault loop: a cluster, a random workload with faults at random points, and the invariants.

    report = run_seed(seed, folder, steps=10, disk=None)   # report.violations: what broke, empty when nothing did

Each step draws a fault (or none) and an operation from `random.Random(seed)`, brings the fault about, does the
operation, gives the fault a moment to strike, heals it (restarts what was killed, mends the link, frees the disk,
sets the clock right) and waits, bounded, until the cluster has converged: every write that must reach the server
is in its history, and both laptops hold exactly the server's files. After the last step the invariants are checked
through the laptops themselves (`memory-proxy history`, `memory-proxy search`).
"""

from __future__ import annotations

import random
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults import kinds
from tests.faults.cluster import NAMES, Cluster, until
from tests.faults.ledger import Ledger, differences, invented_lines, newest_token
from tests.faults.workload import perform

CONVERGE_WITHIN = 60.0  # seconds for the cluster to agree after a fault is healed
STRIKE_WITHIN = 3.0  # seconds a fault is given to strike before it is healed
OPERATIONS_PER_STEP = 3  # at most, one after the other, while the fault is in force


@dataclass
class SeedReport:
    seed: int
    steps: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)  # faults that struck (a point reached, a link cut)
    violations: list[str] = field(default_factory=list)
    journal: list[str] = field(default_factory=list)  # step by step: the fault and the operation
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # fault kinds this machine cannot inject, and why


def run_seed(seed: int, folder: Path, *, steps: int, disk: Path | None) -> SeedReport:
    rng = random.Random(seed)
    report = SeedReport(seed)
    if disk is None:
        report.skipped.append("disk-full: needs root to mount a small tmpfs")
    started = time.monotonic()
    ledger = Ledger(seed)
    cluster = Cluster(folder, disk=disk)
    try:
        cluster.start_server()
        for name in NAMES:
            cluster.start_proxy(name)
        for step in range(1, steps + 1):
            report.steps = step
            fault = kinds.choose(rng, disk)
            if fault is not None:
                kinds.apply(fault, cluster, rng, disk)
                report.faults[fault.kind] += 1
            done = "; ".join(
                perform(rng, cluster, ledger, step, fault.laptop if fault else None)
                for _ in range(rng.randint(1, OPERATIONS_PER_STEP))
            )
            report.journal.append(f"step {step}: {fault or 'no fault'}; {done}")
            _strike(cluster, ledger, fault)
            kinds.heal(fault, cluster, disk)
            if fault is not None and fault.fired:
                report.fired[fault.kind] += 1
            problems = _converge(cluster, ledger)
            if problems:
                report.violations += [f"step {step} ({fault or 'no fault'}; {done}): {p}" for p in problems]
                break
        else:
            report.violations += final_checks(cluster, ledger)
    except AssertionError as exc:  # a process that would not start, a command that failed: a finding too
        report.violations.append(f"step {report.steps}: {exc}")
    except Exception as exc:  # the loop's own failure: shown like a violation, so that it is fixed too
        where = traceback.extract_tb(exc.__traceback__)[-1]
        report.violations.append(
            f"step {report.steps}: the loop failed: {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
        )
    finally:
        cluster.close()
        report.seconds = time.monotonic() - started
    return report


def _strike(cluster: Cluster, ledger: Ledger, fault: kinds.Fault | None) -> None:
    """Give the fault its moment, at most STRIKE_WITHIN seconds: an armed point until its process dies, a fault
    that lasts (a wrong clock, a full disk, a laptop offline, a cutting relay) all of it, any other until the
    step's writes reach the server."""
    deadline = time.monotonic() + STRIKE_WITHIN
    while time.monotonic() < deadline:
        if fault is not None and fault.kind in kinds.POINTS:
            if kinds.struck(fault, cluster):
                return
        elif (fault is None or fault.kind not in kinds.LASTING) and _acknowledge(cluster, ledger):
            return
        time.sleep(0.05)


def _acknowledge(cluster: Cluster, ledger: Ledger) -> bool:
    """Mark the writes whose text the server's history now holds (at any path); True when none is left."""
    pending = ledger.pending()
    if pending:
        versions = cluster.history_texts()
        for written in pending:
            written.acknowledged_as = written.held_by(versions)
    return not ledger.pending()


def _converge(cluster: Cluster, ledger: Ledger) -> list[str]:
    def agreed() -> bool:
        if not _acknowledge(cluster, ledger):
            return False
        server = cluster.server_files()
        return all(laptop.files() == server for laptop in cluster.laptops.values())

    try:
        until(agreed, "the laptops and the server to agree", CONVERGE_WITHIN)
    except AssertionError as exc:
        server = cluster.server_files()
        lost = [f"never reached the server: {w.laptop}'s {w.path} of step {w.step}" for w in ledger.pending()]
        apart = [d for name, laptop in cluster.laptops.items() for d in differences(server, laptop.files(), name)]
        return [str(exc), *lost, *apart]
    return [f"bytes nobody wrote: {line}" for line in invented_lines(ledger, cluster.server_files())]


def final_checks(cluster: Cluster, ledger: Ledger) -> list[str]:
    """The invariants through each laptop: every acknowledged write in memory_history, search agreeing with files."""
    problems: list[str] = []
    files = cluster.server_files()
    for number, name in enumerate(NAMES):
        listed = _all_history(cluster, name)
        for written in ledger.writes:
            if written.acknowledged_as is not None and written.acknowledged_as not in listed:
                problems.append(
                    f"{name}'s memory_history lacks {written.laptop}'s {written.path} of step {written.step}"
                )
        for path, text in sorted(files.items())[number :: len(NAMES)]:  # each file searched from one laptop
            token = newest_token(text)
            if token is None:
                continue
            hits = cluster.tool(name, "search", token, "--max-results", "10")["hits"]
            keyword = [hit["path"] for hit in hits if hit["matched_by"] in ("keyword", "both")]
            if path not in keyword:
                problems.append(f"searching {token} from {name} does not find {path}")
            problems += [
                f"searching {token} finds {p}, which does not hold it" for p in keyword if token not in files.get(p, "")
            ]
    return problems


def _all_history(cluster: Cluster, name: str) -> set[Any]:
    """Every content hash in the index's history, as `memory-proxy history` on laptop `name` pages through it."""
    hashes: set[Any] = set()
    before: list[str] = []
    while True:
        page = cluster.tool(name, "history", "--limit", "100", *before)
        hashes.update(version["hash"] for version in page["versions"])
        if page.get("next_before") is None:
            return hashes
        before = ["--before", str(page["next_before"])]
