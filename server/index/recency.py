"""A recency boost for daily logs: their scores decay by half every `half_life` days of age. Pure.

A daily log is `memory/YYYY-MM-DD*.md` (`memory/2026-03-01.md`, `memory/2026-03-01-standup.md`): its day is in its
name. Other files (MEMORY.md, notes, transcripts) hold lasting knowledge and keep their score. Age counts from
`today` (the caller's clock), a day in the future counts as today. The ranking among daily logs depends only on
their age differences, so which day is "today" moves them against the other files, not against each other.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from server.index.fusion import Scored

_DAILY_LOG = re.compile(r"^memory/(?:[^/]+/)*(\d{4}-\d{2}-\d{2})[^/]*\.md$")


def log_day(path: str) -> dt.date | None:
    """The day in a daily log's name, None for any other file (or a name that is not a real date)."""
    match = _DAILY_LOG.match(path)
    if match is None:
        return None
    try:
        return dt.date.fromisoformat(match.group(1))
    except ValueError:
        return None


def recency_factor(path: str, today: dt.date, half_life_days: float) -> float:
    """What a hit's score is multiplied by: 1 for a file that is not a daily log, 0.5 ** (age / half_life) else."""
    day = log_day(path)
    if day is None or half_life_days <= 0:
        return 1.0
    age = max(0, (today - day).days)
    return float(0.5 ** (age / half_life_days))


def boost_recent(
    scored: Sequence[Scored], paths: Mapping[int, str], today: dt.date, half_life_days: float
) -> list[Scored]:
    """`scored` with daily logs' scores decayed by age, best first again (ties by chunk id, as fusion breaks them)."""
    if half_life_days <= 0:
        return list(scored)
    boosted = [
        replace(s, score=s.score * recency_factor(paths[s.chunk_id], today, half_life_days))
        if s.chunk_id in paths
        else s
        for s in scored
    ]
    return sorted(boosted, key=lambda s: (-s.score, s.chunk_id))
