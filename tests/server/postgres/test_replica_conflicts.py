"""Two servers on one PostgreSQL database changing the same file at the same moment: what one server's lock orders
(two appends, two pushes from one base, a write and its retry with the same idempotency key) ends as it does on one
server, and a conflict the caller asked for with its expected_hash is still refused."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from server.error_table import answer_for
from server.errors import ConflictError
from server.index.engine_settings import EngineSettings
from server.memory.caller import CallerContext
from server.memory.history import HistoryService
from server.memory.service import MemoryService
from server.postgres.backend import PgBackend
from server.sync.service import SyncService
from syncproto.messages import PushChange
from syncproto.wire import sha256_hex

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)
ROUNDS = 20  # enough that the two calls overlap in some round (one or two rounds in three did before the fix)
WAIT = 30.0  # seconds any one wait may take

ALICE = CallerContext("alice", "SHA256:alice", {"proj": "rw"}, "proj", "rw")
BOB = CallerContext("bob", "SHA256:bob", {"proj": "rw"}, "proj", "rw")

T = TypeVar("T")


@pytest.fixture
def replicas(postgres_url: str, tmp_path: Path) -> Iterator[tuple[MemoryService, MemoryService]]:
    """Two services on the test's database, each with its own data folder, as two `serve` processes."""
    started = []
    for name in ("one", "two"):
        data = tmp_path / name
        backend = PgBackend(postgres_url, data, None, EngineSettings(), lambda: NOW)
        started.append(MemoryService(data, None, backend=backend, clock=lambda: NOW))
    yield started[0], started[1]
    for service in started:
        service.close()


def at_once(*calls: Callable[[], T]) -> list[T | Exception]:
    """What each of `calls` returned or raised, each run in a thread of its own, all let go at the same moment."""
    start = threading.Barrier(len(calls), timeout=WAIT)
    outcomes: dict[int, T | Exception] = {}

    def run(slot: int, call: Callable[[], T]) -> None:
        try:
            start.wait()
            outcomes[slot] = call()
        except Exception as exc:
            outcomes[slot] = exc

    threads = [threading.Thread(target=run, args=(slot, call)) for slot, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    return [outcomes[slot] for slot in range(len(calls))]


def refusals(outcomes: Sequence[object]) -> list[str]:
    return [f"{type(outcome).__name__}: {outcome}" for outcome in outcomes if isinstance(outcome, Exception)]


def test_appends_through_two_replicas_at_once_are_all_acknowledged_and_kept(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    one.write(ALICE, "first line", path="memory/log.md")
    for n in range(ROUNDS):
        outcomes = at_once(
            partial(one.write, ALICE, f"alice line {n}", path="memory/log.md"),
            partial(two.write, BOB, f"bob line {n}", path="memory/log.md"),
        )
        assert refusals(outcomes) == [], n
    stored = two.read(BOB, "memory/log.md")
    assert stored is not None
    lines = [line for line in stored.text.splitlines() if line]
    expected = {"first line"} | {f"{who} line {n}" for who in ("alice", "bob") for n in range(ROUNDS)}
    assert sorted(lines) == sorted(expected)


def test_one_write_retried_through_both_replicas_at_once_is_made_once(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    one.write(ALICE, "first line", path="memory/log.md")
    for n in range(ROUNDS):
        outcomes = at_once(
            *(partial(service.write, ALICE, f"line {n}", path="memory/log.md", idempotency_key=f"write-{n}")
              for service in (one, two))
        )  # fmt: skip
        assert refusals(outcomes) == [], n
        hashes = {outcome.hash for outcome in outcomes if not isinstance(outcome, Exception)}
        assert len(hashes) == 1, n  # the second answer is the first one's, replayed
    stored = one.read(ALICE, "memory/log.md")
    assert stored is not None
    assert [line for line in stored.text.splitlines() if line] == ["first line"] + [f"line {n}" for n in range(ROUNDS)]


def test_a_section_replace_and_an_append_elsewhere_through_two_replicas_at_once_are_both_kept(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    text = "# Notes\n\n## Plans\n\nplan 0\n\n## Log\n\nstarted\n"
    one.write(ALICE, text, path="memory/notes.md", mode="replace", expected_hash="absent")
    for n in range(ROUNDS):
        plans = one.get(ALICE, "memory/notes.md", heading="Plans").section_hash  # the caller's own expected_hash
        outcomes = at_once(
            partial(one.write, ALICE, f"## Plans\n\nplan {n + 1}\n", path="memory/notes.md", mode="replace",
                    heading="Plans", expected_hash=plans),
            partial(two.write, BOB, f"entry {n}", path="memory/notes.md", heading="Log"),
        )  # fmt: skip
        assert refusals(outcomes) == [], n
    stored = one.read(ALICE, "memory/notes.md")
    assert stored is not None
    assert f"plan {ROUNDS}" in stored.text and "plan 0\n" not in stored.text
    assert all(f"entry {n}" in stored.text for n in range(ROUNDS))


def test_pushes_of_one_base_through_two_replicas_at_once_are_both_kept(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    laptops = SyncService(replicas[0]), SyncService(replicas[1])
    base_text = "# Notes\n\nline one\n\nline two\n\nline three\n"
    base = sha256_hex(base_text.encode())
    for n in range(ROUNDS):
        path = f"memory/shared{n}.md"
        replicas[0].write(ALICE, base_text, path=path, mode="replace", expected_hash="absent")
        outcomes = at_once(
            partial(laptops[0].push, ALICE, [PushChange(path, base, base_text.replace("one", "ONE by alice"))]),
            partial(laptops[1].push, BOB, [PushChange(path, base, base_text.replace("three", "THREE by bob"))]),
        )
        assert refusals(outcomes) == [], n
        statuses = sorted(outcome[1][0].status for outcome in outcomes if not isinstance(outcome, Exception))
        assert statuses == ["applied", "merged"], n
        stored = replicas[1].read(BOB, path)
        assert stored is not None and "line ONE by alice" in stored.text and "line THREE by bob" in stored.text, n


def test_two_replaces_of_one_expected_hash_through_two_replicas_at_once_keep_one_and_refuse_the_other(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    current = one.write(ALICE, "version 0\n", path="memory/plan.md", mode="replace", expected_hash="absent").hash
    for n in range(ROUNDS):
        outcomes = at_once(
            *(partial(service.write, who, f"version {n + 1} by {who.name}\n", path="memory/plan.md", mode="replace",
                      expected_hash=current)
              for service, who in ((one, ALICE), (two, BOB)))
        )  # fmt: skip
        refused = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
        kept = [outcome for outcome in outcomes if not isinstance(outcome, Exception)]
        assert len(kept) == 1 and len(refused) == 1 and isinstance(refused[0], ConflictError), n
        assert refused[0].current_hash == kept[0].hash
        stored = one.read(ALICE, "memory/plan.md")
        assert stored is not None and stored.hash == kept[0].hash
        current = kept[0].hash


def test_an_append_with_a_stale_expected_hash_through_another_replica_is_refused_and_adds_nothing(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    seen = one.write(ALICE, "first line", path="memory/log.md").hash
    now = two.write(BOB, "second line", path="memory/log.md").hash
    with pytest.raises(ConflictError) as refused:
        one.write(ALICE, "third line", path="memory/log.md", expected_hash=seen)
    assert refused.value.current_hash == now
    stored = one.read(ALICE, "memory/log.md")
    assert stored is not None and stored.hash == now and "third line" not in stored.text


def test_a_conflict_that_escapes_a_sync_call_is_answered_as_a_conflict_not_an_internal_error() -> None:
    answer = answer_for(ConflictError("memory/x.md has changed", "0" * 64))
    assert answer is not None and (answer.status, answer.code, answer.shown) == (409, "conflict", True)


def test_a_restore_and_an_append_through_two_replicas_at_once_are_both_made(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    history = HistoryService(one)
    for n in range(ROUNDS):
        path = f"memory/restored-{n}.md"
        made = one.write(ALICE, "the first text", path=path)
        one.write(ALICE, "the second text", path=path, mode="replace", expected_hash=made.hash)
        first = history.history(ALICE, path=path).versions[-1]
        outcomes = at_once(
            partial(history.restore, ALICE, path, first.version),
            partial(two.write, BOB, f"bob line {n}", path=path),
        )
        assert refusals(outcomes) == [], n
        stored = two.read(BOB, path)
        assert stored is not None
        assert stored.text.startswith("the first text") and "the second text" not in stored.text, n  # restored
        newest = history.history(ALICE, path=path).versions[:2]  # in either order: each made over the other
        assert sorted((entry.change, entry.updated_by) for entry in newest) == [("restore", "alice"), ("write", "bob")]


def test_conflicting_pushes_of_one_caller_through_two_replicas_in_one_second_each_keep_a_conflict_copy(
    replicas: tuple[MemoryService, MemoryService],
) -> None:
    one, two = replicas
    laptops = SyncService(one), SyncService(two)
    base_text = "# Notes\n\nline one\n"
    base = sha256_hex(base_text.encode())
    for n in range(ROUNDS):
        path = f"memory/copied-{n}.md"
        made = one.write(ALICE, base_text, path=path, mode="replace", expected_hash="absent")
        one.write(
            ALICE, base_text.replace("one", "one by the server"), path=path, mode="replace", expected_hash=made.hash
        )
        edits = [base_text.replace("one", f"one by laptop {k}") for k in (1, 2)]
        outcomes = at_once(*(partial(laptops[k].push, ALICE, [PushChange(path, base, edits[k])]) for k in (0, 1)))
        assert refusals(outcomes) == [], n
        copies = [result.conflict_path for _, results in outcomes for result in results]  # type: ignore[union-attr]
        assert len(set(copies)) == 2 and all(copies), n  # both kept, under two names (the clock stands still)
        for copy, edit in zip(copies, edits, strict=True):
            stored = one.read(ALICE, copy)
            assert stored is not None and stored.text == edit, n
