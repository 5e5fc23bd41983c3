"""Prometheus metrics: what the server counts, what it reads from each index on a scrape, and the text format.

- requests of the inner app (what laptops ask for, seen after decryption) by route, method and status class, with
  a latency histogram; the time runs until the answer is complete, so a long-poll's wait and an SSE stream's
  life are included (`/sync/changes` is a pull, `/sync/push` a push);
- requests at the channel (`/v1/handshake`, `/v1/tunnel`, `/healthz`) by exact status: refused handshakes show
  up as 403, rate-limited ones as 429; and the live channel sessions;
- per index, read from its database at scrape time, opened by the server or not: files per source and chunks in
  the search index, chunks still waiting for a vector (the embedding backlog), a running vector rebuild, the files
  in the mirror, and the database's size. With SQLite that is `index.sqlite3` and `state.sqlite3` under the data
  folder (`read_index_sizes`, sizes with their WAL files); with PostgreSQL, every index schema in the database
  (`server.observe.pg_sizes`, the size of the whole schema). Both count the same `IndexCounts`
  (`server.index.stats`);
- the embedding provider and model in use, the server version, the process start time.

Labels never hold memory text, paths or caller names: routes come from a fixed list, index names are the
operator's. `server.observe.metrics_app` serves the rendering (inside the channel, and on a loopback-only listener).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from server.index.naming import read_info
from server.index.rechunk import live_database
from server.index.stats import index_counts
from server.index.store import database_bytes, read_only, vec_available
from server.mirror.state import count_live_files
from syncproto.wire import CHANGES_PATH, PUSH_PATH

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ROUTES = frozenset({"/mcp", CHANGES_PATH, PUSH_PATH, "/metrics", "/healthz"})
CHANNEL_PATHS = frozenset({"/v1/handshake", "/v1/tunnel", "/healthz"})
METHODS = frozenset({"GET", "POST", "DELETE"})
BUSY_TIMEOUT_MS = 1000

Labels = tuple[tuple[str, str], ...]
Visible = Callable[[str], bool]  # which index names a reader may see


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float
    suffix: str = ""  # "_bucket", "_sum", "_count" for histograms


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "counter", "gauge", "histogram"
    help: str
    samples: Sequence[Sample] = ()


@dataclass
class _Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        for number, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[number] += 1
        self.total += seconds
        self.count += 1


def route_of(path: str) -> str:
    """The route label for an inner path: one of `ROUTES`, else "other" (labels must stay few)."""
    return path if path in ROUTES else "other"


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


class Metrics:
    """The counters, filled from the event loop and read from any thread, and the collectors a scrape runs."""

    def __init__(self, *, started: float | None = None) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = {}
        self._latency: dict[tuple[str, str], _Histogram] = {}
        self._channel: dict[tuple[str, str], int] = {}
        self.started = time.time() if started is None else started
        # Each collector gives families at scrape time; it is told which indexes the reader may see.
        self.collectors: list[Callable[[Visible], Iterable[Family]]] = []

    def observe_request(self, path: str, method: str, status: int, seconds: float) -> None:
        """One answered request of the inner app."""
        route, verb = route_of(path), method if method in METHODS else "other"
        with self._lock:
            key = (route, verb, status_class(status))
            self._requests[key] = self._requests.get(key, 0) + 1
            self._latency.setdefault((route, verb), _Histogram()).observe(seconds)

    def observe_channel(self, path: str, status: int) -> None:
        """One request at the channel (outside the tunnel)."""
        key = (path if path in CHANNEL_PATHS else "other", str(status))
        with self._lock:
            self._channel[key] = self._channel.get(key, 0) + 1

    def families(self, visible: Visible) -> list[Family]:
        """Everything, for a reader who may see the indexes `visible` accepts."""
        with self._lock:
            requests = sorted(self._requests.items())
            latency = sorted((key, (list(h.buckets), h.total, h.count)) for key, h in self._latency.items())
            channel = sorted(self._channel.items())
        out = [
            Family(
                "memory_requests_total",
                "counter",
                "Requests to the inner app (after decryption), by route, method and status class.",
                [Sample((("route", r), ("method", m), ("status", s)), n) for (r, m, s), n in requests],
            ),
            Family(
                "memory_request_duration_seconds",
                "histogram",
                "Time until the inner app's answer was complete (long-polls and SSE streams included).",
                [sample for key, numbers in latency for sample in _histogram_samples(key, *numbers)],
            ),
            Family(
                "memory_channel_requests_total",
                "counter",
                "Requests at the channel, by path and status (handshake 403: refused, 429: rate-limited).",
                [Sample((("path", p), ("status", s)), n) for (p, s), n in channel],
            ),
            Family(
                "memory_process_start_time_seconds",
                "gauge",
                "When the server process started, in seconds since the epoch.",
                [Sample((), self.started)],
            ),
        ]
        for collect in self.collectors:
            try:
                out.extend(collect(visible))
            except Exception as exc:  # a scrape must not fail because one collector did
                log.warning("metrics collector failed: %s", type(exc).__name__)
        return out

    def render(self, visible: Visible) -> str:
        return render(self.families(visible))


def _histogram_samples(key: tuple[str, str], buckets: list[int], total: float, count: int) -> list[Sample]:
    labels: Labels = (("route", key[0]), ("method", key[1]))
    pairs = zip(BUCKETS, buckets, strict=True)
    samples = [Sample((*labels, ("le", _number(bound))), n, "_bucket") for bound, n in pairs]
    samples.append(Sample((*labels, ("le", "+Inf")), count, "_bucket"))
    samples.append(Sample(labels, total, "_sum"))
    samples.append(Sample(labels, count, "_count"))
    return samples


# rendering ---------------------------------------------------------------------------------------------------


def render(families: Iterable[Family]) -> str:
    """The Prometheus text exposition format (0.0.4). A family without samples still gets its HELP and TYPE."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            labels = ",".join(f'{name}="{_escape_label(value)}"' for name, value in sample.labels)
            braced = f"{{{labels}}}" if labels else ""
            lines.append(f"{family.name}{sample.suffix}{braced} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# collectors --------------------------------------------------------------------------------------------------


IndexSizes = Callable[[Visible], list["IndexSize"]]  # the sizes of the indexes a reader may see


@dataclass(frozen=True)
class IndexSize:
    name: str
    files: dict[str, int]  # per source, in the search index
    chunks: int
    pending_vectors: int | None  # None: unknown (no sqlite-vec here)
    rebuilding: bool
    mirror_files: int | None  # None: no state.sqlite3 yet
    # On disk, per database: "index" (index.sqlite3, rebuildable) and "state" (state.sqlite3, sync history) with
    # SQLite; "schema" with PostgreSQL, where one schema holds both.
    database_bytes: dict[str, int]


def read_index_sizes(data_dir: Path, visible: Visible) -> list[IndexSize]:
    """The size of every index under `data_dir` that `visible` accepts, read through read-only connections
    (an index the server has not opened yet counts too). An index that cannot be read is left out, and logged."""
    root = data_dir / "indexes"
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    sizes = []
    for entry in entries:
        if not _live(entry).is_file() or not visible(entry.name):
            continue
        try:
            sizes.append(_index_size(entry))
        except apsw.Error as exc:
            log.warning("metrics: cannot read index %s: %s", entry.name, type(exc).__name__)
    return sizes


def _live(directory: Path) -> Path:
    """The index's live database: `index.sqlite3`, or the `index-<n>.sqlite3` a re-chunk swapped in."""
    return directory / live_database(read_info(directory))


def _index_size(directory: Path) -> IndexSize:
    vec = vec_available()
    live = _live(directory)
    with read_only(live, vec=vec, busy_ms=BUSY_TIMEOUT_MS) as db:
        counts = index_counts(db, vec_loaded=vec)
    mirror_files = None
    if (directory / "state.sqlite3").is_file():
        with read_only(directory / "state.sqlite3", vec=False, busy_ms=BUSY_TIMEOUT_MS) as state:
            mirror_files = count_live_files(state)
    return IndexSize(
        name=directory.name,
        files=counts.files,
        chunks=counts.chunks,
        pending_vectors=counts.pending_vectors,
        rebuilding=counts.rebuilding,
        mirror_files=mirror_files,
        database_bytes={
            "index": database_bytes(live),
            "state": database_bytes(directory / "state.sqlite3"),
        },
    )


def index_families(sizes: Sequence[IndexSize]) -> list[Family]:
    """The per-index gauges for `sizes`."""

    def gauge(name: str, help: str, samples: Iterable[Sample]) -> Family:
        return Family(name, "gauge", help, list(samples))

    return [
        gauge(
            "memory_index_files",
            "Files in the index, per source (memory files, session logs).",
            (Sample((("index", s.name), ("source", src)), n) for s in sizes for src, n in sorted(s.files.items())),
        ),
        gauge("memory_index_chunks", "Chunks in the index.", (Sample((("index", s.name),), s.chunks) for s in sizes)),
        gauge(
            "memory_index_pending_vectors",
            "Chunks waiting for an embedding (keyword-searchable meanwhile): the embedding backlog.",
            (Sample((("index", s.name),), s.pending_vectors) for s in sizes if s.pending_vectors is not None),
        ),
        gauge(
            "memory_index_vectors_rebuilding",
            "1 while the index's vectors are rebuilt for another model in the background.",
            (Sample((("index", s.name),), int(s.rebuilding)) for s in sizes),
        ),
        gauge(
            "memory_mirror_files",
            "Markdown files in the index's mirror (the truth the index is built from).",
            (Sample((("index", s.name),), s.mirror_files) for s in sizes if s.mirror_files is not None),
        ),
        gauge(
            "memory_index_database_bytes",
            "Size on disk: SQLite's index.sqlite3 (database=index, rebuildable) and state.sqlite3 (database=state, sync"
            " history), WAL included; PostgreSQL's whole index schema (database=schema), indexes and TOAST included.",
            (
                Sample((("index", s.name), ("database", kind)), size)
                for s in sizes
                for kind, size in sorted(s.database_bytes.items())
            ),
        ),
    ]


def index_collector(read: IndexSizes) -> Callable[[Visible], list[Family]]:
    """A collector reading every visible index's size with `read` at scrape time (`read_index_sizes` of a data
    folder, or `server.observe.pg_sizes.read_pg_index_sizes` of a database)."""
    return lambda visible: index_families(read(visible))


def info_collector(version: str, provider: str, model: str) -> Callable[[Visible], list[Family]]:
    """The server version and the embedding model in use (`none` when search is keyword-only)."""
    families = [
        Family("memory_server_info", "gauge", "The server's version.", [Sample((("version", version),), 1)]),
        Family(
            "memory_embedding_provider_info",
            "gauge",
            "The embedding provider and model chosen at start-up.",
            [Sample((("provider", provider), ("model", model)), 1)],
        ),
    ]
    return lambda visible: families


def sessions_collector(count: Callable[[], int]) -> Callable[[Visible], list[Family]]:
    """Live channel sessions."""
    return lambda visible: [Family("memory_channel_sessions", "gauge", "Live channel sessions.", [Sample((), count())])]
