"""Short previews of a hit, centred on the first query word found in it."""

from __future__ import annotations

import re

SNIPPET_CHARS = 280
_SPACE = re.compile(r"\s+")


def make_snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    positions = [p for p in (lowered.find(t) for t in terms if t) if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    start = min(start, len(flat) - width)
    if start > 0:  # begin at a word boundary
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
    window = flat[start : start + width].rstrip()
    return ("…" if start > 0 else "") + window + ("…" if start + width < len(flat) else "")
