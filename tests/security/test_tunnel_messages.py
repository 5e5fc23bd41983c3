"""A smaller finding: after a write ran and its answer was lost, the retry's refusal must not claim the request
was not executed (reproduced end to end in tests/channel/test_attacks.py, the lost-answer test); here each
status says only what it proves."""

from __future__ import annotations

import pytest

from channel.errors import TunnelRefused
from channel.keys import PrivateKey

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")


@pytest.mark.parametrize(
    ("status", "ran"), [(401, "it was not executed"), (429, "it was not executed"), (502, "may or may not")]
)
def test_each_refusal_says_only_what_its_status_proves(status, ran):
    assert ran in str(TunnelRefused(status))
