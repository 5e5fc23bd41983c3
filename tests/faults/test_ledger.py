"""The fault loop's own checks can fail: a line nobody wrote is found, a merged write is held by its merge."""

from __future__ import annotations

from tests.faults.ledger import Ledger, invented_lines, newest_token


def test_a_line_nobody_wrote_is_a_violation() -> None:
    ledger = Ledger(seed=5)
    ledger.record("alice", "memory/a.md", "# a\n\n- one zq5x1\n", step=1, token="zq5x1")
    assert invented_lines(ledger, {"memory/a.md": "# a\n\n- one zq5x1\n"}) == []
    assert invented_lines(ledger, {"memory/a.md": "# a\n- one zq5x1 garbled\n"}) == [
        "memory/a.md: '- one zq5x1 garbled'"
    ]


def test_a_write_is_held_by_its_own_text_or_by_a_merge_holding_its_line() -> None:
    ledger = Ledger(seed=5)
    mine = ledger.record("bob", "memory/a.md", "# a\n\n- two zq5x2\n", step=1, token="zq5x2")
    assert mine.held_by({"h1": "# a\n\n- one zq5x1\n"}) is None
    assert mine.held_by({"h1": "# a\n\n- one zq5x1\n", "merged": "# a\n\n- one zq5x1\n- two zq5x2\n"}) == "merged"
    assert mine.held_by({mine.digest: mine.text}) == mine.digest
    assert newest_token("- a zq5x9\n- b zq5x10\n") == "zq5x10"
