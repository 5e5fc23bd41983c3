"""Secrets that give themselves away by their shape: private key blocks, JWTs and issuers' prefixed tokens.

These need no context, so they run first (see rules.py): `api_key = "sk-ant-…"` is then reported as an
anthropic-key, and the assignment rules that run later see a marker and leave it.
"""

from __future__ import annotations

import re

from redaction.entropy import char_classes, looks_random
from redaction.rule import Rule, after_edge, when


def _mixed(text: str) -> bool:
    """Two of lower case, upper case, digits: a generated body, not a word after a familiar prefix."""
    return char_classes(text) >= 2


_DIGIT_RUN = re.compile(r"[0-9]{6}")


def _slack_body(text: str) -> bool:
    """Slack's tokens hold a long run of digits (a team or user id): `xoxo-party-2024` is a channel name."""
    return _DIGIT_RUN.search(text) is not None


# Private key blocks. A line break may be real or escaped inside a JSON or Python string (transcripts are JSON
# lines); a key flattened onto one line uses spaces. The body is read line by line, each line an atomic group,
# so a block without its END line costs one pass over its body and no backtracking.
_LABEL = r"(?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?"
_BEGIN = rf"-----BEGIN {_LABEL}-----"
_END = rf"-----END {_LABEL}-----"
_BREAK = r"(?:\r?\n|(?:\\{1,2}+r)?+\\{1,2}+n)"  # real, escaped once (JSON) or twice (JSON in JSON)
_INDENT = r"[ \t>]{0,40}+"  # indentation, or a Markdown quote
_HEADER = r"(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset|MessageID):[^\r\n\\]{0,200}+"
_LINE = rf"(?>(?:{_BREAK}|[ ]){_INDENT}(?:{_HEADER}|[A-Za-z0-9+/=]{{1,8192}}+{_INDENT})?)"
# Without its END line a block ends where the base64 does: at a line that is neither a header nor base64. A
# short line counts only if it holds a digit or `+/=`, so a "Thanks" under a truncated key is not swallowed.
_BASE64_LINE = r"(?:[A-Za-z0-9+/]{16,8192}+={0,2}+|(?=[A-Za-z]{0,15}+[0-9+/=])[A-Za-z0-9+/]{1,15}+={0,2}+)"
_LINE_END = r"(?=[ \t]{0,40}+(?:[\r\n\"'`]|\\{1,2}+[rn]|\Z))"
_TRUNCATED_LINE = rf"(?>(?:{_BREAK}{_INDENT}){{1,3}}+(?:{_HEADER}|{_BASE64_LINE}){_LINE_END})"

_B64URL = "A-Za-z0-9_-"  # the alphabet, and so the word edge, of most tokens
_ALNUM_ = "A-Za-z0-9_"


def _stripe(prefix: str, body: str) -> Rule:
    return Rule("stripe-key", re.compile(after_edge(prefix, _ALNUM_) + body + r"(?![A-Za-z0-9_])"), when(_mixed))


FORMAT_RULES: tuple[Rule, ...] = (
    Rule("private-key", re.compile(rf"{_BEGIN}{_LINE}{{0,1000}}(?:{_BREAK}|[ ]){_INDENT}{_END}")),
    Rule("private-key", re.compile(rf"{_BEGIN}{_TRUNCATED_LINE}{{1,1000}}")),
    # A key block in base64, as a Kubernetes Secret (`tls.key:`) or a kubeconfig (`client-key-data:`) holds it:
    # `-----BEGIN ` then, within the label, `PRIVATE KEY` at any of its three alignments.
    Rule(
        "private-key",
        re.compile(
            after_edge("LS0tLS1CRUdJTi", "A-Za-z0-9+/")
            + r"[A-Za-z0-9+/]{0,80}?(?:UFJJVkFURSBLRV|BSSVZBVEUgS0VZ|QUklWQVRFIEtFW)[A-Za-z0-9+/]{0,65536}+={0,2}+"
            r"(?![A-Za-z0-9+/=])"
        ),
    ),
    # This project's own key files (channel/keys.py): the prefix stays, the base64 of seed and public key goes.
    Rule(
        "private-key",
        re.compile(r"memory-ed25519-private[ \t]{1,8}+(?P<secret>[A-Za-z0-9+/]{40,200}+={0,2}+)(?![A-Za-z0-9+/=])"),
    ),
    Rule(
        "jwt",
        re.compile(
            after_edge("eyJ", _B64URL)
            + r"[A-Za-z0-9_-]{5,4096}+\.eyJ[A-Za-z0-9_-]{5,16384}+\.[A-Za-z0-9_-]{8,4096}+(?![A-Za-z0-9_-])"
        ),
    ),
    # Anthropic's keys also start with `sk-`, so they are taken before OpenAI's.
    Rule(
        "anthropic-key",
        re.compile(after_edge("sk-ant-", _B64URL) + r"[A-Za-z0-9_-]{20,250}+(?![A-Za-z0-9_-])"),
    ),
    # `sk-` alone also starts package names (`sk-learn-contrib-…`): the rest must look generated.
    Rule(
        "openai-key",
        re.compile(after_edge("sk-", _B64URL) + r"(?!ant-)[A-Za-z0-9_-]{20,250}+(?![A-Za-z0-9_-])"),
        when(looks_random),
    ),
    Rule(
        "github-token",
        re.compile(
            after_edge("g", _ALNUM_)
            + r"(?:h[pousr]_[A-Za-z0-9]{36,251}+(?![A-Za-z0-9])|ithub_pat_[A-Za-z0-9_]{22,251}+(?![A-Za-z0-9_]))"
        ),
        when(_mixed),
    ),
    Rule(
        "gitlab-token",
        re.compile(
            after_edge("gl", _B64URL)
            + r"(?:pat|ptt|dt|rt|ft|cbt|soat|imt|oas)-[A-Za-z0-9_-]{20,255}+(?:\.[A-Za-z0-9_-]{2,255}+){0,3}+"
            r"(?![A-Za-z0-9_-])"
        ),
        when(_mixed),
    ),
    # The whole URL is the credential: anyone holding it can post to the channel.
    Rule(
        "slack-webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{16,255}+"),
    ),
    Rule(
        "slack-token",
        re.compile(after_edge("x", _B64URL) + r"(?:ox[abeoprs]|app)-[A-Za-z0-9-]{10,255}+(?![A-Za-z0-9_-])"),
        when(_slack_body),
    ),
    _stripe("sk_", r"(?:live|test)_[A-Za-z0-9]{16,247}+"),
    _stripe("rk_", r"(?:live|test)_[A-Za-z0-9]{16,247}+"),
    _stripe("whsec_", r"[A-Za-z0-9]{24,247}+"),
    Rule(
        "google-api-key",
        re.compile(after_edge("AIza", _B64URL) + r"[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
    ),
    Rule(
        "huggingface-token",
        re.compile(after_edge("hf_", _ALNUM_) + r"[A-Za-z0-9]{34,64}+(?![A-Za-z0-9_])"),
        when(_mixed),
    ),
    Rule(
        "npm-token",
        re.compile(after_edge("npm_", _ALNUM_) + r"[A-Za-z0-9]{36}(?![A-Za-z0-9_])"),
        when(_mixed),
    ),
    # The base64 of the macaroon's location, pypi.org or test.pypi.org, is a fixed prefix.
    Rule(
        "pypi-token",
        re.compile(after_edge("pypi-AgE", _B64URL) + r"(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,4096}+"),
    ),
    Rule(
        "sendgrid-key",
        re.compile(after_edge("SG.", _B64URL) + r"[A-Za-z0-9_-]{16,32}+\.[A-Za-z0-9_-]{16,64}+(?![A-Za-z0-9_-])"),
        when(_mixed),
    ),
    # `pa-` starts ordinary words too; Voyage's keys are long and mix letters and digits.
    Rule(
        "voyage-key",
        re.compile(after_edge("pa-", _B64URL) + r"[A-Za-z0-9_-]{40,250}+(?![A-Za-z0-9_-])"),
        when(looks_random),
    ),
    Rule(
        "aws-key",
        re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)(?<![A-Za-z0-9]....)[0-9A-Z]{16}(?![0-9A-Za-z])"),
    ),
)
