"""`memory-server` index/search/status: in process for the details, once as a real console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from server.cli.main import main
from server.index.model_package import DEFAULT_LOCAL_MODEL
from tests.conftest import EXAMPLE, REPO


@pytest.fixture
def data_dir(tmp_path, local_embedder, capsys):
    # local_embedder loads the model once per run; the CLI's own LocalEmbedder shares it.
    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "index", str(EXAMPLE), "--index", "demo"]) == 0
    assert "5 indexed" in capsys.readouterr().out
    return data


def test_search_prints_ranked_hits_with_citations(data_dir, capsys):
    assert main(["--data-dir", str(data_dir), "search", "webhook idempotency", "--index", "demo", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[hybrid] 2 hits")
    assert " 1. " in out and "memory/2026-11-18.md#L" in out


def test_search_json_has_the_mode_and_every_hit_field(data_dir, capsys):
    args = ["--data-dir", str(data_dir), "search", "integer cents", "--index", "demo", "--json", "--path", "MEMORY.md"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["search_mode"] == "hybrid" and result["hits"]
    hit = result["hits"][0]
    assert set(hit) == {"path", "start_line", "end_line", "heading", "score", "snippet", "source", "citation",
                        "matched_by", "vector_rank", "keyword_rank", "tags", "category"}  # fmt: skip
    assert hit["path"] == "MEMORY.md" and hit["citation"] == f"MEMORY.md#L{hit['start_line']}-L{hit['end_line']}"


def test_many_queries_from_a_jsonl_file_answer_line_by_line(data_dir, tmp_path, capsys):
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"id": 1, "query": "rate limiting token bucket"}\n'
        "not json\n"
        '{"id": "x", "query": "   "}\n'
        '{"query": "no id"}\n'
        '{"id": 2, "query": "slow invoice report"}\n'
    )
    code = main(["--data-dir", str(data_dir), "search", "--index", "demo", "--queries", str(queries)])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 1  # some lines failed, and each failure is reported in place
    assert [line.get("id", line.get("line")) for line in lines] == [1, 2, "x", 4, 2]
    assert lines[0]["hits"][0]["path"] == "memory/2026-11-16.md"
    assert "error" in lines[1] and "error" in lines[2] and "error" in lines[3]
    assert lines[4]["hits"][0]["path"] == "memory/2026-11-18.md"


def test_status_reports_model_counts_and_modes(data_dir, capsys):
    assert main(["--data-dir", str(data_dir), "status", "--index", "demo", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["files"] == {"memory": 5} and status["pending_vectors"] == 0
    assert status["model"] == DEFAULT_LOCAL_MODEL.model_id and status["dimensions"] == 384
    assert status["search_modes"] == ["hybrid", "vector", "keyword"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["search", "x", "--index", "nope"], 1, "no index named 'nope'"),
        (["search", "x", "--index", "../up"], 2, "index names"),
        (["search", "   ", "--index", "demo"], 2, "empty"),
        (["search", "x", "--index", "demo", "--limit", "0"], 2, "limit"),
        (["search", "--index", "demo"], 2, "either a QUERY or --queries"),
        (["search", "x", "--index", "demo", "--from", "2026-99-01"], 2, "YYYY-MM-DD"),
        (["status", "--index", "nope"], 1, "no index named"),
        (["index", "/definitely/not/here", "--index", "demo"], 2, "not a folder"),
    ],
)
def test_bad_arguments_give_a_clear_error_and_exit_code(data_dir, capsys, args, code, message):
    assert main(["--data-dir", str(data_dir), *args]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_console_script_indexes_and_searches_in_a_fresh_process(tmp_path):
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    script = shutil.which("memory-server", path=os.path.dirname(sys.executable))
    assert script, "the console script is installed in the virtualenv"
    data = tmp_path / "data"
    env = {**os.environ, "MEMORY_DATA_DIR": str(data)}
    first = subprocess.run(
        [script, "index", str(folder), "--index", "demo"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr
    found = subprocess.run(
        [script, "search", "advisory lock", "--index", "demo", "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["path"] == "memory/decisions.md"
    assert (data / "indexes" / "demo" / "index.sqlite3").is_file()
