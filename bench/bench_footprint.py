"""Benchmark: the server's footprint with each local embedding runtime (MEMORY_EMBEDDING_RUNTIME=torch|onnx).

For each runtime, in the same run, as real `memory-server` processes (the console script, as users start it):

- start: seconds from spawning `memory-server serve` to `/healthz` answering 200 (the model is loaded before the
  server listens, so this is the time to a server that can embed), and its resident memory idle 3 s later;
- indexing: `memory-server index` of 1,000 generated markdown notes (headings, lists, prose, code, ~2 chunks
  each): its peak resident memory (the kernel's high-water mark), seconds and chunks embedded per second
  (model load included: ~0.2 s onnx, several s torch);
- searching: `memory-server search --queries` running 200 queries against that index: peak resident memory and
  queries per second (process start and model load included).

    .venv/bin/python bench/bench_footprint.py [--quick]      (--quick: 200 notes, 50 queries)

Results: bench/results/footprint.md and .json.
"""

from __future__ import annotations

import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import REPO, report, save_json, table

QUICK = "--quick" in sys.argv
NOTES = 200 if QUICK else 1_000
QUERIES = 50 if QUICK else 200
RUNTIMES = ("torch", "onnx")
SCRIPT = REPO / ".venv" / "bin" / "memory-server"
START_TIMEOUT = 180.0
IDLE_SETTLE = 3.0

TOPICS = [
    ("deploy", ["staging", "rollback", "canary", "Kubernetes", "Helm chart", "blue-green", "migration window"]),
    ("database", ["Postgres", "index bloat", "vacuum", "replica lag", "connection pool", "slow query", "schema"]),
    ("auth", ["OAuth", "token refresh", "session cookie", "SSO", "key rotation", "2FA", "service account"]),
    ("frontend", ["React", "bundle size", "hydration", "CSS grid", "accessibility", "dark mode", "Storybook"]),
    ("testing", ["flaky test", "fixture", "property test", "coverage", "snapshot", "CI cache", "mutation score"]),
    ("observability", ["Prometheus", "alert", "trace", "log level", "dashboard", "SLO", "error budget"]),
    ("performance", ["latency p95", "memory leak", "profiling", "cache hit rate", "batch size", "GC pause"]),
]
VERBS = ["decided to", "agreed to", "will", "should not", "tried to", "had to", "plan to", "stopped trying to"]
ACTIONS = ["pin", "upgrade", "document", "split", "remove", "measure", "cache", "retry", "rewrite", "monitor"]
REASONS = [
    "because the last incident took two hours to diagnose",
    "since the vendor changed its defaults in the new release",
    "after the benchmark showed a 30% regression",
    "so that new team members can find it without asking",
    "which keeps the nightly job under its time budget",
    "until the upstream fix lands",
]


def sentence(rng: random.Random, topic: tuple[str, list[str]]) -> str:
    name, terms = topic
    return (
        f"We {rng.choice(VERBS)} {rng.choice(ACTIONS)} the {rng.choice(terms)} for {name} "
        f"{rng.choice(REASONS)}; see the {rng.choice(terms)} notes from week {rng.randint(1, 52)}."
    )


def note(rng: random.Random, number: int) -> str:
    topic = rng.choice(TOPICS)
    lines = [f"# {topic[0].title()} note {number}: {rng.choice(topic[1])}", ""]
    for section in range(rng.randint(1, 3)):
        lines += [f"## {rng.choice(['Context', 'Decision', 'Follow-ups', 'Details'])} {section + 1}", ""]
        lines += [" ".join(sentence(rng, topic) for _ in range(rng.randint(2, 5))), ""]
        lines += [f"- [{rng.choice([' ', 'x'])}] {sentence(rng, topic)}" for _ in range(rng.randint(1, 4))] + [""]
        if rng.random() < 0.25:
            lines += ["```bash", f"kubectl rollout undo deploy/{topic[0]}-api --to-revision={number % 9}", "```", ""]
    return "\n".join(lines)


def make_notes(folder: Path, count: int) -> None:
    rng = random.Random(1)
    (folder / "memory").mkdir(parents=True)
    (folder / "MEMORY.md").write_text("# Memory\n\nGenerated notes for the footprint benchmark.\n")
    for number in range(count):
        (folder / "memory" / f"note-{number:04d}.md").write_text(note(rng, number))


def queries(path: Path, count: int) -> None:
    rng = random.Random(2)
    with path.open("w") as out:
        for number in range(count):
            topic = rng.choice(TOPICS)
            text = f"why did we {rng.choice(ACTIONS)} the {rng.choice(topic[1])}"
            out.write(json.dumps({"id": number, "query": text}) + "\n")


def environment(runtime: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        MEMORY_EMBEDDING_RUNTIME=runtime,
        MEMORY_EMBEDDING_PROVIDERS="local",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def serve(runtime: str, root: Path) -> dict[str, float]:
    port = free_port()
    command = [str(SCRIPT), "--data-dir", str(root / "data"), "--keys-dir", str(root / "keys"), "serve"]
    started = time.perf_counter()
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env=environment(runtime),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not healthy(port):
            if process.poll() is not None or time.perf_counter() - started > START_TIMEOUT:
                raise RuntimeError(f"memory-server serve ({runtime}) did not become healthy")
            time.sleep(0.05)
        start_seconds = time.perf_counter() - started
        time.sleep(IDLE_SETTLE)
        return {"start_s": start_seconds, "idle_mb": status_mb(process.pid, "VmRSS")}
    finally:
        process.terminate()
        process.wait(timeout=30)


def run_measured(command: list[str], env: dict[str, str]) -> tuple[str, float, float]:
    """Run `command` to completion: its stdout, wall seconds and peak resident MB (the kernel's high-water mark)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    out = process.stdout.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{command[3:5]} failed with status {status}")
    return out, seconds, usage.ru_maxrss / 1024


def measure(runtime: str, notes: Path, query_file: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"footprint-{runtime}-") as scratch:
        root = Path(scratch)
        row: dict[str, Any] = {"runtime": runtime, **serve(runtime, root)}
        env = environment(runtime)
        base = [str(SCRIPT), "--data-dir", str(root / "indexes")]
        out, seconds, peak = run_measured([*base, "index", str(notes), "--index", "bench", "--json"], env)
        indexed = json.loads(out.strip().splitlines()[-1])
        row.update(
            index_peak_mb=peak,
            index_s=seconds,
            chunks=indexed["chunks_embedded"],
            chunks_per_s=indexed["chunks_embedded"] / indexed["seconds"],
        )
        search = [*base, "search", "--index", "bench", "--queries", str(query_file), "--mode", "hybrid"]
        out, seconds, peak = run_measured(search, env)
        answered = sum(1 for line in out.splitlines() if '"hits"' in line)
        if answered != QUERIES:
            raise RuntimeError(f"{answered} of {QUERIES} queries answered")
        row.update(search_peak_mb=peak, queries_per_s=QUERIES / seconds)
        return row


def main() -> None:
    if not SCRIPT.exists():
        raise SystemExit(f"{SCRIPT} is missing: run `make .venv/.installed-dev` first")
    with tempfile.TemporaryDirectory(prefix="footprint-notes-") as scratch:
        notes = Path(scratch) / "notes"
        make_notes(notes, NOTES)
        query_file = Path(scratch) / "queries.jsonl"
        queries(query_file, QUERIES)
        rows = [measure(runtime, notes, query_file) for runtime in RUNTIMES]
    headers = [
        "runtime",
        "start to /healthz (s)",
        "RSS idle (MB)",
        f"peak RSS indexing {NOTES} notes (MB)",
        "chunks/s",
        f"peak RSS {QUERIES} searches (MB)",
        "queries/s",
    ]
    body = [
        [
            r["runtime"],
            f"{r['start_s']:.1f}",
            f"{r['idle_mb']:.0f}",
            f"{r['index_peak_mb']:.0f} ({r['chunks']} chunks, {r['index_s']:.0f} s)",
            f"{r['chunks_per_s']:.1f}",
            f"{r['search_peak_mb']:.0f}",
            f"{r['queries_per_s']:.1f}",
        ]
        for r in rows
    ]
    text = (
        "`.venv/bin/python bench/bench_footprint.py` (real `memory-server` processes; RSS from /proc and wait4; "
        f"this bench process's own peak: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB).\n\n"
        + table(headers, body)
    )
    report("footprint", "Server footprint by embedding runtime", text)
    save_json("footprint", {"notes": NOTES, "queries": QUERIES, "rows": rows})


if __name__ == "__main__":
    main()
