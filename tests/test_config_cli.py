"""`memory-server config` shows what the server would run with, and never a secret."""

from __future__ import annotations

import json

from server.cli import main

VOYAGE_KEY = "pa-voyage-CANARY-0123456789"
OPENAI_KEY = "sk-openai-CANARY-0123456789"


def test_the_effective_configuration_masks_every_secret(tmp_path, monkeypatch, capsys):
    secret = tmp_path / "voyage_key"
    secret.write_text(VOYAGE_KEY + "\n")
    monkeypatch.setenv("VOYAGE_API_KEY_FILE", str(secret))
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDERS", "voyage,local")
    monkeypatch.setenv("MEMORY_OPENAI_BASE_URL", "https://user:hunter2@gateway.example/v")
    monkeypatch.setenv("MEMORY_PORT", "9000")

    assert main(["--data-dir", str(tmp_path / "d"), "config", "--json"]) == 0
    shown = capsys.readouterr().out
    values = json.loads(shown)
    assert values["data_dir"] == str(tmp_path / "d") and values["port"] == 9000
    assert values["embedding_providers"] == ["voyage", "local"]
    assert values["voyage_api_key"] == f"set, from file {secret}"
    assert values["openai_api_key"] == "set, from OPENAI_API_KEY"
    assert values["openai_base_url"] == "https://***@gateway.example/v"
    for leaked in (VOYAGE_KEY, OPENAI_KEY, "hunter2"):
        assert leaked not in shown

    assert main(["config"]) == 0
    table = capsys.readouterr().out
    assert "voyage_api_key" in table and VOYAGE_KEY not in table and OPENAI_KEY not in table


def test_an_unusable_key_file_is_reported_without_failing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(tmp_path / "missing"))
    assert main(["config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["openai_api_key"].startswith("unusable: OPENAI_API_KEY_FILE")
