"""A query that names a month or a year favours the daily logs of that time. Pure.

"What setback did Melanie face in October 2023?" is answered by what was written in October 2023, yet neither side
of the search reads a date the way the question says it: the keyword side has "october" in no chunk (the log is
`memory/2023-10-13.md`), and a vector knows "October" only as a word. So when a query names a period (a month, with
or without its day and year; a year; an ISO date such as 2023-10 or 2023-10-13) the candidates from daily logs of
that month (of any year when none is named) or of that year move up by PERIOD_BOOST on the fused score. A day named
counts as its month: what is told on a day is often told days later.

It reorders what passed the threshold and the gate, like the recency boost (`recency.py`: a daily log's day is in
its name), and the hits keep their scores. A month's name counts only written with a capital letter, and "May"
only beside a number or after "in": "may" is also a verb.

Measured on locomo-dev, where 116 of 997 questions name a period: r@50lines 0.910 -> 0.920, r@100lines 0.945 ->
0.950 through the CLI (`bench/bench_locomo.py`); over those 116 questions 0.976 of the evidence is in the first 50
lines, against 0.886 (`bench/explore_periods.py`, bench/results/periods.md). The boost saturates at 0.2: every
candidate of the period is then ahead of every other.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from server.index.fusion import Scored
from server.index.recency import log_day

PERIOD_BOOST = 0.2
MONTHS = "January February March April May June July August September October November December".split()
_MONTH = "|".join(MONTHS)
_NAMED = re.compile(
    rf"\b(?P<before>in\s+)?(?:(?P<day_first>\d{{1,2}})\s+)?(?P<month>{_MONTH})\b"
    rf"(?:\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b)?(?:(?:\s*,\s*|\s+)(?P<year>(?:19|20)\d\d)\b)?"
)
_ISO = re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>0[1-9]|1[0-2])(?:-\d\d)?\b")
_YEAR = re.compile(r"\b(?P<year>(?:19|20)\d\d)\b")


@dataclass(frozen=True)
class Period:
    year: int | None  # None: that month of any year
    month: int | None  # None: the whole year

    def holds(self, day: dt.date) -> bool:
        return (self.year is None or day.year == self.year) and (self.month is None or day.month == self.month)


def named_period(query: str) -> Period | None:
    """The first period `query` names (a month, possibly with its year; an ISO month or day; a year), or None."""
    for match in _NAMED.finditer(query):
        numbered = match["day_first"] or match["day"] or match["year"]
        if match["month"] == "May" and not (numbered or match["before"]):
            continue
        return Period(int(match["year"]) if match["year"] else None, MONTHS.index(match["month"]) + 1)
    iso = _ISO.search(query)
    if iso is not None:
        return Period(int(iso["year"]), int(iso["month"]))
    year = _YEAR.search(query)
    return Period(int(year["year"]), None) if year is not None else None


def period_order(
    scored: Sequence[Scored], paths: Mapping[int, str], period: Period | None, boost: float = PERIOD_BOOST
) -> list[Scored]:
    """`scored` in the order to show them: daily logs of `period` first by `boost` (ties by chunk id, as fusion
    breaks them); unchanged without a period. The scores stay as they were."""
    if period is None:
        return list(scored)

    def boosted(item: Scored) -> float:
        day = log_day(paths.get(item.chunk_id, ""))
        return item.score + (boost if day is not None and period.holds(day) else 0.0)

    return sorted(scored, key=lambda item: (-boosted(item), item.chunk_id))
