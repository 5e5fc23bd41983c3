"""The recency boost: daily logs' scores halve per half-life of age, every other file keeps its score."""

from __future__ import annotations

import datetime as dt

import pytest

from server.index.fusion import Scored
from server.index.recency import boost_recent, log_day, recency_factor

TODAY = dt.date(2026, 3, 31)


@pytest.mark.parametrize(
    ("path", "day"),
    [
        ("memory/2026-03-01.md", dt.date(2026, 3, 1)),
        ("memory/2026-03-01-standup.md", dt.date(2026, 3, 1)),
        ("memory/logs/2026-03-01.md", dt.date(2026, 3, 1)),
        ("MEMORY.md", None),
        ("memory/notes.md", None),
        ("memory/2026-02-30.md", None),  # not a real day
        ("sessions/2026-03-01-abc.md", None),  # a transcript, not a daily log
        ("memory/2026-03-01.txt", None),
    ],
)
def test_a_daily_log_is_known_by_the_day_in_its_name(path, day):
    assert log_day(path) == day


def test_a_score_halves_per_half_life_of_age_and_the_future_counts_as_today():
    assert recency_factor("memory/2026-03-31.md", TODAY, 30) == 1.0
    assert recency_factor("memory/2026-03-01.md", TODAY, 30) == pytest.approx(0.5)
    assert recency_factor("memory/2026-01-30.md", TODAY, 30) == pytest.approx(0.25)
    assert recency_factor("memory/2026-04-10.md", TODAY, 30) == 1.0
    assert recency_factor("MEMORY.md", TODAY, 30) == 1.0
    assert recency_factor("memory/2026-01-30.md", TODAY, 0) == 1.0


def test_a_recent_log_overtakes_an_old_one_while_lasting_notes_keep_their_place():
    scored = [Scored(1, 0.8, 0.8, 0), Scored(2, 0.7, 0.7, 0), Scored(3, 0.6, 0.6, 0)]
    paths = {1: "memory/2025-03-31.md", 2: "MEMORY.md", 3: "memory/2026-03-30.md"}
    boosted = boost_recent(scored, paths, TODAY, 30)
    assert [s.chunk_id for s in boosted] == [2, 3, 1]
    assert boosted[0].score == 0.7 and boosted[1].score == pytest.approx(0.6 * 0.5 ** (1 / 30))
    assert boost_recent(scored, paths, TODAY, 0) == scored
