"""Finding 7: the forms the probe found unredacted. Each secret disappears entirely; what is not a secret stays."""

from __future__ import annotations

import pytest

from redaction import redact

LEAKS = [
    ("**password**: hunter2", "hunter2"),
    ("*password*: hunter2x", "hunter2x"),
    ("password: correct horse battery staple", "correct horse battery staple"),
    ("password=Tr0ub4dor&3xyz!", "Tr0ub4dor&3xyz!"),
    ("pwd=Tr0ub4dor#3xyz", "Tr0ub4dor#3xyz"),
    ("admin:s3cretPassw0rd@db.example.com", "s3cretPassw0rd"),
    ("connect with `admin:s3cretPassw0rd@db.example.com`", "s3cretPassw0rd"),
]
KEPT = [
    "PWD=/home/me/project",
    "run `pwd`: it prints the folder",
    "Password: your password here",
    "the password: see the vault, row 3",
    "image: registry.example.com/app:1.2@sha256:0123abcd",
    "meet at 10:30@example.com",
    "First pass: build everything",
]


@pytest.mark.parametrize(("text", "secret"), LEAKS)
def test_no_character_of_the_secret_survives(text, secret):
    redacted = redact(text).text
    assert "[redacted:" in redacted
    for piece in {secret, *secret.split(), secret[-6:]}:
        assert piece not in redacted, (text, redacted)


@pytest.mark.parametrize("text", KEPT)
def test_what_only_looks_like_a_secret_is_kept(text):
    assert redact(text).text == text
