"""The kinds of secret the redactor knows, and the marker that stands in for each one it removes.

A marker names its kind so a reader (or an agent reading its own memory) still knows what was there, and it is
built from characters no rule accepts inside a secret, so redacting an already redacted text changes nothing.
"""

from __future__ import annotations

# In the order the rules run (see rules.py): a format that names its issuer is tried before the generic kinds.
KINDS: tuple[str, ...] = (
    "private-key",
    "jwt",
    "anthropic-key",
    "openai-key",
    "github-token",
    "gitlab-token",
    "slack-webhook",
    "slack-token",
    "stripe-key",
    "google-api-key",
    "huggingface-token",
    "npm-token",
    "pypi-token",
    "sendgrid-key",
    "voyage-key",
    "aws-key",
    "api-token",
    "aws-secret",
    "url-password",
    "basic-auth",
    "bearer-token",
    "password",
    "secret",
)

MARKER_OPEN = "[redacted:"
_KNOWN = frozenset(KINDS)


def marker(kind: str) -> str:
    """The text that replaces a secret of `kind`, e.g. `[redacted:aws-key]`; an unknown kind is a bug, not a guess."""
    if kind not in _KNOWN:
        raise ValueError(f"unknown redaction kind {kind!r}")
    return f"{MARKER_OPEN}{kind}]"


def has_marker(text: str) -> bool:
    """Whether `text` already holds a marker: such a value was redacted before and must be left as it is."""
    return MARKER_OPEN in text
