"""The memory browser's whole-file read through a real `memory-proxy ui` and a real server: a file arrives whole,
however its lines fall across the server's pieces, and can then be edited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_memory_browser_guard import request, sign_in
from tests.ui_support import RunningUi, memory_ui, team

TEAM = "team"


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[RunningUi]:
    with team(tmp_path, {"alice": {TEAM: "rw"}}) as running, memory_ui(running.laptops["alice"]) as serving:
        yield serving


def test_a_file_with_a_line_longer_than_a_piece_arrives_whole_and_editable(ui):
    page = {"Cookie": sign_in(ui), "Origin": ui.origin, "Content-Type": "application/json"}
    long_line = "".join(f"{n:06d}é" for n in range(14_000))  # 98,000 characters, past two pieces of 40,000
    text = "# Blob\n\n" + "a short line\n" * 3 + long_line + "\n" + long_line[:50_000] + "\nthe end\n"
    body = json.dumps({"path": "memory/blob.md", "base": None, "content": text}).encode()
    status, _, saved = request(ui, "POST", "/api/save", page, body)
    assert status == 200, saved

    status, _, answer = request(ui, "GET", "/api/file?path=memory/blob.md", page)
    shown = json.loads(answer)
    assert status == 200 and shown["content"] == text
    assert shown["editable"] is True and shown["hash"] == json.loads(saved)["hash"]
