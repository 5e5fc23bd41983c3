"""Progress of long work on stderr: done of total with the rate and the time left, throttled to a line a second, the
last item always shown; `memory-server index` reports it while stdout keeps the result."""

from __future__ import annotations

import io

from server.cli.main import main
from syncproto.progress import Progress, progress_line
from tests.conftest import EXAMPLE


def test_a_line_gives_done_of_total_the_rate_and_the_time_left():
    assert progress_line("indexing", 0, 1000, 0.0) == "indexing: 0/1,000 files (0%)"
    assert progress_line("indexing", 120, 1000, 10.0) == "indexing: 120/1,000 files (12%), 12.0/s, about 1m13s left"
    assert progress_line("indexing", 1000, 1000, 50.0) == "indexing: 1,000/1,000 files (100%), 20.0/s, done"
    assert progress_line("indexing", 10, 100_000, 5.0).endswith("about 13h53m left")
    assert progress_line("indexing", 5, 10, 0.5) == "indexing: 5/10 files (50%)"  # no rate in the first second


def test_lines_are_throttled_to_one_per_interval_and_the_last_item_always_shows():
    now = [0.0]
    out = io.StringIO()
    progress = Progress(10, "syncing", out=out, every=1.0, clock=lambda: now[0])
    for _ in range(9):
        now[0] += 0.3
        progress.step()
    now[0] += 0.3
    progress.step()
    lines = out.getvalue().splitlines()
    assert lines[0] == "syncing: 1/10 files (10%)"
    assert len(lines) == 4 and lines[-1] == "syncing: 10/10 files (100%), 3.3/s, done"


def test_memory_server_index_reports_progress_on_stderr_and_the_result_on_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDERS", "none")  # keyword-only: no model to load for this test
    assert main(["--data-dir", str(tmp_path / "data"), "index", str(EXAMPLE), "--index", "demo"]) == 0
    captured = capsys.readouterr()
    assert "indexing: 5/5 files (100%)" in captured.err
    assert "indexing:" not in captured.out and "5 indexed" in captured.out
