"""Redaction as a property over public secret formats (tests/data/secret_formats.json, after gitleaks' and
detect-secrets' rule shapes): for any value of each format, in any of the ways a note or a transcript holds it,
no run of four characters of the value survives redaction, except the format's documented prefix."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redaction import redact

FORMATS = json.loads((Path(__file__).parents[1] / "data" / "secret_formats.json").read_text())["formats"]
# The ways text holds a value with no context of its own: prose, markdown, shell, JSON, YAML, a transcript line.
SURROUNDINGS = [
    "{s}",
    "deployed with {s} yesterday",
    "- the key: `{s}`",
    "export API_TOKEN={s}",
    '{{"token": "{s}"}}',
    "token: {s}",
    '"content": "use {s} for the staging run"',
]
WINDOW = 4


def literal_prefix(pattern: str) -> str:
    """The fixed text a format's expression starts with (`ghp_`, `AKIA`, `dp.pt.`)."""
    head = re.match(r"(?:\\.|[^\\\[\](){}?*+|])*", pattern)
    return re.sub(r"\\(.)", r"\1", head.group(0) if head else "")


def generated(value: str) -> bool:
    """A value as an issuer makes it, random over its alphabet: mixing two of lower case, upper case and digits,
    no character filling more than a third of it or repeating four times in a row (in either case: `XXXx` is a
    mask). (`sk-0000…` or a body of digits
    only is what hypothesis tries first and what no issuer hands out; the rules leave such stand-ins alone.)"""
    classes = sum(any(test(c) for c in value) for test in (str.islower, str.isupper, str.isdigit))
    most = max(Counter(value).values())
    return classes >= 2 and most <= max(3, len(value) // 3) and re.search(r"(?i)(.)\1{3}", value) is None


def leaked(value: str, keep: str, template: str, redacted: str) -> list[str]:
    """Runs of WINDOW characters of the value (beyond its kept prefix) found in the redacted text, other than those
    the surroundings or a marker hold anyway."""
    tail = value[len(keep) :] if value.startswith(keep) else value
    around = template.replace("{s}", "\x00")
    runs = {tail[i : i + WINDOW] for i in range(len(tail) - WINDOW + 1)}
    return sorted(r for r in runs if r in redacted and r not in around and r not in "[redacted:" + redacted_kinds())


def redacted_kinds() -> str:
    from redaction.kinds import KINDS

    return " ".join(f"[redacted:{kind}]" for kind in KINDS)


@pytest.mark.parametrize("entry", FORMATS, ids=[entry["id"] for entry in FORMATS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_no_run_of_a_secrets_value_survives_beyond_its_documented_prefix(entry, data):
    fixed = len(literal_prefix(entry["value"]))
    values = st.from_regex(entry["value"], fullmatch=True)
    if not entry.get("armoured"):
        values = values.filter(lambda v: generated(v[fixed:]))
    value = data.draw(values, label="value")
    keep = entry.get("keep", "")
    templates = [entry["context"]] if "context" in entry else SURROUNDINGS
    template = data.draw(st.sampled_from(templates), label="surroundings")
    text = template.format(s=value) if "{{" in template else template.replace("{s}", value)
    redacted = redact(text).text
    assert "[redacted:" in redacted, redacted
    assert leaked(value, keep, template, redacted) == [], redacted
    assert redact(redacted).text == redacted  # and redacting again changes nothing
