"""More issuers' prefixed tokens, the shapes public secret scanners (gitleaks, detect-secrets) know them by.

Like `formats.py`, these need no context: the prefix names the issuer and the body is generated. Each body must
mix two character classes (or be hex of a fixed length) so that a word after a familiar prefix stays. All are one
kind, `api-token`: the issuer is plain from the prefix left in the text around the marker's place.

Two prefixes are too plain to stand alone: Twilio's `SK<32 hex>` and Notion's older `secret_<43>` count only after a
word naming their issuer (or, for Twilio, an API key) earlier on their line.

Three issuers' tokens have no prefix: Telegram's `<bot id>:A<34>`, Terraform Cloud's `<14>.atlasv1.<60-70>` and
Discord's `<bot id in base64>.<6>.<27-38>`. Their pattern starts in the middle (at `:A`, `.atlasv1.`, the first
dot) and the judge reads the part before it, at most 28 characters back, so a scan stays linear. These are
replaced whole: no prefix names the issuer.
"""

from __future__ import annotations

import base64
import binascii
import re

from redaction.entropy import char_classes
from redaction.lines import line_before
from redaction.rule import Rule, Span, after_edge, fold, when

_EDGE = "A-Za-z0-9_-"
_DIGITS = frozenset("0123456789")
_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _generated(body: str) -> bool:
    return char_classes(body) >= 2 or (len(body) >= 32 and all(c in "0123456789abcdef" for c in body.lower()))


def _token(prefix: str, body: str, *, edge: str = _EDGE) -> Rule:
    pattern = after_edge(prefix, edge) + body + rf"(?![{edge}])"
    return Rule("api-token", re.compile(pattern), when(lambda token: _generated(token[len(prefix) :])))


_CONTEXT_REACH = 80  # how far back on its line a plain prefix's issuer must be named


def _named_token(prefix: str, body: str, words: str) -> Rule:
    """A `_token` that counts only if `words` (a folded pattern) occurs before it on its line."""
    token = _token(prefix, body)
    context = re.compile(words)

    def judge(match: re.Match[str], text: str) -> Span | None:
        before = fold(line_before(text, match.start(), _CONTEXT_REACH))
        return token.judge(match, text) if context.search(before) else None

    return Rule("api-token", token.pattern, judge)


def _telegram(match: re.Match[str], text: str) -> Span | None:
    """`<bot id>:A<34>`: the bot id is 5 to 16 digits, not the end of a longer number."""
    start = colon = match.start()
    while start > max(0, colon - 17) and text[start - 1] in _DIGITS:
        start -= 1
    if not 5 <= colon - start <= 16:
        return None
    return (start, match.end()) if char_classes(text[colon + 1 : match.end()]) >= 2 else None


def _terraform(match: re.Match[str], text: str) -> Span | None:
    """`<14>.atlasv1.<60-70>`: the 14 characters before the middle are a whole word."""
    start = match.start() - 14
    if start > 0 and text[start - 1] in _B64URL:
        return None
    return (start, match.end()) if char_classes(text[match.start() + len(".atlasv1.") : match.end()]) >= 2 else None


def _discord(match: re.Match[str], text: str) -> Span | None:
    """`<bot id>.<timestamp>.<hmac>`: the first part is the bot's id (a snowflake of 17 to 20 digits) in base64,
    the last one is not masked (`XXXX…`)."""
    start = dot = match.start()
    while start > max(0, dot - 28) and text[start - 1] in _B64URL:
        start -= 1
    if not 23 <= dot - start <= 27 or text[start - 1 : start] == ".":
        return None
    part = text[start:dot]
    try:
        bot_id = base64.b64decode(part + "=" * (-len(part) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    if not (17 <= len(bot_id) <= 20 and bot_id.isdigit()):
        return None
    return (start, match.end()) if char_classes(text[match.end() - 27 : match.end()]) >= 2 else None


ISSUER_RULES: tuple[Rule, ...] = (
    _token("shp", r"(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),  # Shopify
    _token("do", r"[opr]_v1_[a-f0-9]{64}"),  # DigitalOcean
    _token("dapi", r"[a-f0-9]{32}(?:-[0-9])?"),  # Databricks
    # Doppler; a service token may name its config: `dp.st.<config>.<40-44>`.
    _token("dp.", r"(?:pt|st(?:\.[a-z0-9_-]{2,35}+)?|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}"),
    _token("lin_api_", r"[A-Za-z0-9]{40}"),  # Linear
    _token("PMAK-", r"[a-f0-9]{24}-[a-f0-9]{34}"),  # Postman
    _token("AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),  # age
    # Grafana: cloud and service-account tokens
    _token("gl", r"(?:c_[A-Za-z0-9+/]{32,400}={0,2}|sa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})", edge="A-Za-z0-9_+/="),
    _token("sq0", r"(?:atp-[0-9A-Za-z_-]{22}|csp-[0-9A-Za-z_-]{43})"),  # Square
    _token("NRAK-", r"[A-Z0-9]{27}"),  # New Relic
    _token("pscale_", r"(?:tkn|pw|oauth)_[A-Za-z0-9=._-]{32,64}"),  # PlanetScale
    _token("pul-", r"[a-f0-9]{40}"),  # Pulumi
    _token("sbp_", r"[a-f0-9]{40}"),  # Supabase
    _token("hvs.", r"[A-Za-z0-9_-]{90,120}", edge="A-Za-z0-9_.-"),  # HashiCorp Vault
    _token("GOCSPX-", r"[A-Za-z0-9_-]{28}"),  # Google OAuth client secret
    _token("ATATT3", r"[A-Za-z0-9_=-]{180,200}"),  # Atlassian API token
    _token("HRKU-", r"[A-Za-z0-9_-]{58,64}"),  # Heroku
    _token("fo1_", r"[A-Za-z0-9_-]{43}"),  # Fly.io
    _token("dckr_pat_", r"[A-Za-z0-9_-]{27,32}"),  # Docker Hub
    _token("ntn_", r"[A-Za-z0-9]{46}"),  # Notion
    _token("ya29.", r"[A-Za-z0-9_-]{100,4096}+"),  # Google OAuth access token
    # Twilio API key SID and Notion's older integration token: prefixes too plain to stand alone.
    _named_token("SK", r"[0-9a-f]{32}", r"twilio|api[ _-]?key"),
    _named_token("secret_", r"[A-Za-z0-9]{43}", r"notion"),
    # Telegram bot token: `<bot id>:A<34>` (gitleaks telegram-bot-api-token), alone or in `api.telegram.org/bot…`.
    Rule("api-token", re.compile(r":A(?<=[0-9]:A)[A-Za-z0-9_-]{34}(?![A-Za-z0-9_-])"), _telegram),
    # Terraform Cloud / Enterprise API token (gitleaks hashicorp-tf-api-token).
    Rule(
        "api-token",
        re.compile(r"\.atlasv1\.(?<=[A-Za-z0-9]{14}\.atlasv1\.)[A-Za-z0-9_=-]{60,70}+(?![A-Za-z0-9_=-])"),
        _terraform,
    ),
    # Discord bot token (trufflehog's discordbottoken), found from its first dot: a sentence's full stop may
    # follow it, another dotted part may not.
    Rule(
        "api-token",
        re.compile(r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}+(?![A-Za-z0-9_-]|\.[A-Za-z0-9_-])"),
        _discord,
    ),
)
