"""Exploration: do half-written saves reach the server, and what does holding back a file saved just now cost?

One laptop (a real `memory-proxy` process, `tests.sync_support`) syncs with a server in this process. Two writers
work in its project folder at once, as an agent does:
- the log: `SAVES` entries appended to `memory/log.md` in place, each save truncating the file, writing half of
  the new text, pausing `PAUSE` seconds and writing the rest; 0.3 to 0.6 s between saves;
- the busy file: `memory/busy.txt` rewritten every 0.1 s. The watcher reports it (sync carries only `.md` files),
  and its events never let the watcher's burst end, so the proxy scans every `MAX_DELAY` (1 s) whatever the log's
  saves are doing, as in a folder where other files change.

The server's copy of the log is sampled every 5 ms. Every version it held is either whole (the start and the first
k entries) or half written. For each save, the delay from the end of the save until the server first held it.

    .venv/bin/python bench/explore_save_race.py [--saves N] [--quiet-folder]

`--quiet-folder` leaves the busy file out: the proxy then scans only after the watcher's quiet spell (0.2 s after a
save), so no scan meets a save in progress; it shows what the rules cost where they are not needed.

Run at two commits to compare them (`bench/results/save_race.md`).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

import anyio
import anyio.to_thread
from common import percentile, table

from server.index.embeddings.local import LocalEmbedder
from tests.sync_support import Laptop, ProductServer, eventually

INDEX = "race"
LOG, BUSY = "memory/log.md", "memory/busy.txt"
PAUSE = 0.08  # seconds half written: under the proxy's WRITING_NS, as a slow editor's save might be
START = "# Log\n\n" + "".join(f"- line {number:02} of the log's start, kept whole\n" for number in range(40))


def entry(number: int) -> str:
    return f"\n## entry {number:03}\nentry {number}, appended in place\n"


def save_in_place(path: Path, text: str) -> None:
    """Truncate, write half of `text`, pause, write the rest: a reader in the pause sees a part of it."""
    data = text.encode()
    half = len(data) // 2
    with open(path, "r+b") as handle:
        handle.truncate(0)
        handle.write(data[:half])
        handle.flush()
        time.sleep(PAUSE)
        handle.write(data[half:])


def keep_busy(path: Path, stop: threading.Event) -> None:
    number = 0
    while not stop.wait(0.1):
        number += 1
        path.write_text(f"write {number}\n")


def write_log(path: Path, saves: int, saved_at: list[float]) -> None:
    rng = random.Random(7)
    text = START
    for number in range(saves):
        text += entry(number)
        save_in_place(path, text)
        saved_at.append(time.monotonic())
        time.sleep(rng.uniform(0.3, 0.6))


async def run(saves: int, busy_folder: bool) -> None:
    embedder = LocalEmbedder()
    embedder.warm_up()
    wholes = {START + "".join(entry(n) for n in range(count)): count for count in range(saves + 1)}
    seen: dict[str, float] = {}  # each version the server held -> when first seen
    saved_at: list[float] = []
    with tempfile.TemporaryDirectory(prefix="save-race-") as folder:
        root = Path(folder)
        server = ProductServer(root / "server", embedder, {"alice": {INDEX: "rw"}})
        alice = Laptop(root / "alice", server, "alice", INDEX)
        server.start()
        try:
            async with alice.running():
                alice.write(LOG, START)
                alice.write(BUSY, "write 0\n")
                await eventually(lambda: server.text(INDEX, LOG) == START, "the log's start on the server")
                stop = threading.Event()
                busy = threading.Thread(target=keep_busy, args=(alice.path(BUSY), stop), daemon=True)
                if busy_folder:
                    busy.start()
                done = anyio.Event()

                async def sample() -> None:
                    while not done.is_set():
                        text = server.text(INDEX, LOG)
                        if text is not None and text not in seen:
                            seen[text] = time.monotonic()
                        await anyio.sleep(0.005)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(sample)
                    await anyio.to_thread.run_sync(write_log, alice.path(LOG), saves, saved_at)
                    final = START + "".join(entry(n) for n in range(saves))
                    await eventually(lambda: server.text(INDEX, LOG) == final, "the last save on the server", within=60)
                    done.set()
                stop.set()
                if busy_folder:
                    busy.join()
        finally:
            server.stop()
    half = [text for text in seen if text not in wholes]
    reached: list[float] = []
    for number, at in enumerate(saved_at):
        first = min((when for text, when in seen.items() if wholes.get(text, -1) > number), default=None)
        if first is not None:
            reached.append(max(0.0, first - at))
    print(
        table(
            ["saves", "versions on the server", "half written", "save to server p50 (s)", "p95 (s)", "max (s)"],
            [
                [
                    saves,
                    len(seen),
                    len(half),
                    percentile(reached, 50),
                    percentile(reached, 95),
                    max(reached),
                ]
            ],
        )
    )
    for text in half[:3]:
        print(f"--- half written, {len(text)} characters, ends: {text[-60:]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=100)
    parser.add_argument("--quiet-folder", action="store_true", help="no busy file beside the log")
    args = parser.parse_args()
    anyio.run(run, args.saves, not args.quiet_folder)


if __name__ == "__main__":
    main()
