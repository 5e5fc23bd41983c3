"""The faults the loop injects, each applied before a step's operation and healed after it.

server-point   the server restarted with one named fault point armed: SIGKILL between two steps of a write,
               push, merge or indexing, if the operation reaches it
server-kill    SIGKILL of the server at a random moment of the operation
proxy-point    one laptop's proxy restarted with a named point of its pull or push armed
proxy-kill     SIGKILL of one laptop's proxy at a random moment
relay-cut      the TCP relay cuts every connection a few hundred bytes further (mid-request or mid-answer)
clock          one laptop's proxy restarted with its clock an hour ahead or behind (libfaketime): the server's
               handshake window refuses it; or two minutes ahead (accepted), then set right at the heal
offline        one laptop's proxy quit for the step (its user keeps editing)
disk-full      the server's data folder (a small tmpfs) filled to the last byte
index-corrupt  the server stopped, its index database truncated or overwritten in the middle, started again
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.cluster import NAMES, Cluster
from tests.server.test_disk_full import fill

SERVER_POINTS = (
    "mirror.write.staged",
    "mirror.write.recorded",
    "mirror.write.published",
    "mirror.write.committed",
    "mirror.delete.unlinked",
    "sync.push.received",
    "sync.push.applied",
    "sync.merge.merged",
    "sync.push.indexed",
    "index.chunked",
    "index.embedded",
    "index.committed",
)
PROXY_POINTS = ("proxy.pull.written", "proxy.pull.saved", "proxy.push.answered")
KINDS = (
    "server-point",
    "server-kill",
    "proxy-point",
    "proxy-kill",
    "relay-cut",
    "clock",
    "offline",
    "disk-full",
    "index-corrupt",
)
LASTING = ("relay-cut", "clock", "offline", "disk-full")  # in force for the whole step, not one moment
POINTS = ("server-point", "proxy-point")  # strike when the operation reaches them, if it does


@dataclass
class Fault:
    kind: str
    detail: str = ""
    laptop: str | None = None  # the laptop whose proxy the fault concerns
    fired: bool = False
    cuts_before: int = 0  # a point was reached, a timed kill found its process alive, a connection was cut
    timer: threading.Timer | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return f"{self.kind}({self.detail})" if self.detail else self.kind


def choose(rng: random.Random, disk: Path | None) -> Fault | None:
    """A fault for the next step (None: a step without one), drawn from `rng` alone so that a seed replays."""
    if rng.random() < 0.25:
        return None
    kinds = [kind for kind in KINDS if disk is not None or kind != "disk-full"]
    kind = rng.choice(kinds)
    laptop = rng.choice(NAMES)
    if kind == "server-point":
        return Fault(kind, f"{rng.choice(SERVER_POINTS)}@{rng.randint(1, 2)}")
    if kind == "server-kill":
        return Fault(kind, f"after {rng.uniform(0.0, 1.5):.2f} s")
    if kind == "proxy-point":
        return Fault(kind, f"{rng.choice(PROXY_POINTS)}@{rng.randint(1, 2)}", laptop)
    if kind == "proxy-kill":
        return Fault(kind, f"after {rng.uniform(0.0, 1.5):.2f} s", laptop)
    if kind == "clock":
        return Fault(kind, rng.choice(("+1h", "-1h", "+2m")), laptop)
    if kind == "index-corrupt":
        return Fault(kind, rng.choice(("truncate", "overwrite")))
    return Fault(kind, laptop=laptop if kind == "offline" else None)


def apply(fault: Fault, cluster: Cluster, rng: random.Random, disk: Path | None) -> None:
    """Bring the fault about (the timed kills start their timers: they fire during the operation)."""
    if fault.kind == "server-point":
        cluster.kill_server()
        cluster.start_server(points=fault.detail)
    elif fault.kind == "server-kill":
        fault.timer = threading.Timer(_delay(fault), cluster.kill_server)
    elif fault.kind == "proxy-point":
        assert fault.laptop is not None
        cluster.kill_proxy(fault.laptop)
        cluster.start_proxy(fault.laptop, points=fault.detail)
    elif fault.kind == "proxy-kill":
        laptop = fault.laptop
        assert laptop is not None
        fault.timer = threading.Timer(_delay(fault), lambda: cluster.kill_proxy(laptop))
    elif fault.kind == "relay-cut":
        fault.cuts_before = cluster.relay.cuts
        cluster.relay.cut(rng)
    elif fault.kind == "clock":
        assert fault.laptop is not None
        cluster.stop_proxy(fault.laptop)
        cluster.start_proxy(fault.laptop, clock=fault.detail)
    elif fault.kind == "offline":
        assert fault.laptop is not None
        cluster.stop_proxy(fault.laptop)
    elif fault.kind == "disk-full":
        assert disk is not None
        fill(disk)  # writes disk/filler until ENOSPC
    elif fault.kind == "index-corrupt":
        cluster.kill_server()
        _damage(cluster.index_dir / "index.sqlite3", fault.detail, rng)
        cluster.start_server()
    if fault.timer is not None:
        fault.timer.daemon = True
        fault.timer.start()


def heal(fault: Fault | None, cluster: Cluster, disk: Path | None) -> None:
    """Undo the fault and restart whatever is down, unarmed, with the right clock: the cluster is whole again."""
    if fault is not None:
        if fault.timer is not None:
            fault.timer.join()
        _note_fired(fault, cluster)
        if fault.kind == "relay-cut":
            cluster.relay.mend()
        elif fault.kind == "disk-full" and disk is not None:
            (disk / "filler").unlink(missing_ok=True)
        elif fault.kind == "server-point":
            cluster.stop_server()  # disarmed: its point may not have been reached
        elif fault.kind in ("proxy-point", "clock") and fault.laptop is not None:
            cluster.stop_proxy(fault.laptop)
    if not cluster.server_alive():
        cluster.start_server()
    for name in NAMES:
        if not cluster.proxy_alive(name):
            cluster.kill_proxy(name)  # reaps a proxy that died at a point
            cluster.start_proxy(name)


def struck(fault: Fault, cluster: Cluster) -> bool:
    """Whether a kill has happened: the process the fault concerns is dead."""
    if fault.kind in ("server-point", "server-kill"):
        return not cluster.server_alive()
    return fault.laptop is not None and not cluster.proxy_alive(fault.laptop)


def _note_fired(fault: Fault, cluster: Cluster) -> None:
    if fault.kind in ("server-point", "server-kill", "proxy-point", "proxy-kill"):
        fault.fired = struck(fault, cluster)
    elif fault.kind == "relay-cut":
        fault.fired = cluster.relay.cuts > fault.cuts_before
    else:
        fault.fired = True  # in force for the whole step


def _delay(fault: Fault) -> float:
    return float(fault.detail.split()[1])


def _damage(database: Path, how: str, rng: random.Random) -> None:
    """Truncate the index database to a random part of itself, or overwrite 4 KiB in its middle with noise."""
    for leftover in (database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        leftover.unlink(missing_ok=True)  # a crash that also lost the log
    if not database.exists():
        return
    size = database.stat().st_size
    with database.open("r+b") as handle:
        if how == "truncate":
            handle.truncate(rng.randint(0, max(size - 1, 0)))
        else:
            handle.seek(rng.randint(0, max(size - 4096, 0)))
            handle.write(rng.randbytes(4096))
