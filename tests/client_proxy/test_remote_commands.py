"""What the terminal commands (`memory-proxy search` and its siblings) send to the server's tools."""

from __future__ import annotations

from typing import Any

import pytest

from client_proxy.cli import build_parser
from client_proxy.remote import commands


def test_a_terminal_search_leaves_the_score_threshold_to_the_server_unless_one_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It sent min_score 0, so the terminal showed the weak hits the server's measured gate keeps from agents.
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(commands, "_call", lambda _args, _tool, arguments, _human: sent.append(arguments) or 0)
    for argv in (["search", "deploy"], ["search", "--min-score", "0.2", "deploy"]):
        args = build_parser().parse_args(argv)
        assert args.func(args) == 0
    assert sent[0]["min_score"] is None  # None is left out of the call (`McpSession.call_tool`)
    assert sent[1]["min_score"] == 0.2
