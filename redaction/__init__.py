"""Replace secrets in text with typed markers before the text leaves the laptop or enters the memory.

`redact(text)` returns the text with each secret replaced by `[redacted:<kind>]` (the name of an assignment and
everything around the secret stay) and how many of each kind it replaced. Pure Python, standard library only:
the laptop proxy runs it on session transcripts and the server on `memory_write`, neither with torch loaded.
Redacting twice changes nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redaction.kinds import KINDS, marker
from redaction.rule import Rule, Span, fold
from redaction.rules import RULES

__all__ = ["KINDS", "Redaction", "marker", "redact"]


@dataclass(frozen=True)
class Redaction:
    """A redacted text and, per kind, how many secrets were replaced (empty when none were)."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """How many secrets were replaced, of all kinds."""
        return sum(self.counts.values())


def redact(text: str) -> Redaction:
    """Replace every secret the rules recognise in `text` with its kind's marker."""
    folded = fold(text)
    counts: dict[str, int] = {}
    for rule in RULES:
        spans = _spans(rule, text, folded)
        if spans:
            counts[rule.kind] = counts.get(rule.kind, 0) + len(spans)
            replacement = marker(rule.kind)  # lower case: the folded copy gets the same text
            text, folded = _splice(text, spans, replacement), _splice(folded, spans, replacement)
    return Redaction(text, counts)


def _spans(rule: Rule, text: str, folded: str) -> list[Span]:
    """Where `rule` finds secrets, left to right and not overlapping.

    A password's tail (`password=x&…`) may reach over later matches: one wholly inside it is not judged (judging
    each would make `password=x&password=x&…` cost the tail's length per match), and a secret that starts
    inside it extends it instead of being counted and replaced twice.
    """
    spans: list[Span] = []
    for match in rule.pattern.finditer(folded if rule.folded else text):
        if spans and match.end() <= spans[-1][1]:
            continue
        span = rule.judge(match, text)
        if span is None:
            continue
        if spans and span[0] < spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], span[1]))
        else:
            spans.append(span)
    return spans


def _splice(text: str, spans: list[Span], replacement: str) -> str:
    pieces: list[str] = []
    done = 0
    for start, end in spans:
        pieces += (text[done:start], replacement)
        done = end
    pieces.append(text[done:])
    return "".join(pieces)
