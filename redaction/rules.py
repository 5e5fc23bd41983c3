"""The rule table, in the order the rules run.

Order is part of the meaning: each rule sees the text as the rules before it left it, and no rule accepts a
value holding a marker. So a secret with a recognisable format is named by its issuer (`api_key = "ghp_…"` is a
github-token, `Authorization: Bearer eyJ…` a jwt), a URL password inside a `DATABASE_URL=` assignment is a
url-password, and the generic `password` and `secret` kinds only take what nothing more specific claimed.
"""

from __future__ import annotations

from redaction.context import CONTEXT_RULES
from redaction.formats import FORMAT_RULES
from redaction.issuer_formats import ISSUER_RULES
from redaction.rule import Rule

RULES: tuple[Rule, ...] = FORMAT_RULES + ISSUER_RULES + CONTEXT_RULES
