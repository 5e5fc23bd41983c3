"""`memory-server config` shows what the server would run with, where each value comes from, and never a secret."""

from __future__ import annotations

import json
import logging

import pytest

from server.cli.main import main
from server.settings import VARIABLES, file_key

VOYAGE_KEY = "pa-voyage-CANARY-0123456789"
OPENAI_KEY = "sk-openai-CANARY-0123456789"


def values_of(shown: str) -> dict[str, object]:
    return {key: entry["value"] for key, entry in json.loads(shown).items()}


def origins_of(shown: str) -> dict[str, str]:
    return {key: entry["origin"] for key, entry in json.loads(shown).items()}


def test_the_effective_configuration_masks_every_secret(tmp_path, monkeypatch, capsys):
    secret = tmp_path / "voyage_key"
    secret.write_text(VOYAGE_KEY + "\n")
    secret.chmod(0o600)
    monkeypatch.setenv("VOYAGE_API_KEY_FILE", str(secret))
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDERS", "voyage,local")
    monkeypatch.setenv("MEMORY_OPENAI_BASE_URL", "https://user:hunter2@gateway.example/v")
    monkeypatch.setenv("MEMORY_PORT", "9000")
    monkeypatch.setenv("MEMORY_DATABASE_URL", "postgresql://memory:hunter2@db.internal/memory")

    assert main(["--data-dir", str(tmp_path / "d"), "config", "--json"]) == 0
    shown = capsys.readouterr().out
    values = values_of(shown)
    assert values["data_dir"] == str(tmp_path / "d") and values["port"] == 9000
    assert values["embedding_providers"] == ["voyage", "local"]
    assert values["voyage_api_key"] == f"set, from file {secret}"
    assert values["openai_api_key"] == "set, from OPENAI_API_KEY"
    assert values["openai_base_url"] == "https://***@gateway.example/v"
    assert values["database_url"] == "postgresql://***@db.internal/memory"
    for leaked in (VOYAGE_KEY, OPENAI_KEY, "hunter2"):
        assert leaked not in shown

    assert main(["config"]) == 0
    table = capsys.readouterr().out
    assert "voyage_api_key" in table and VOYAGE_KEY not in table and OPENAI_KEY not in table


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://memory:hun?ter#2@db.internal/memory",  # libpq reads the password up to the '@'
        "postgresql://db.internal/memory?user=memory&password=hunter2",
        "postgresql://memory@db.internal/memory?sslmode=verify-full&sslpassword=hunter2",
    ],
)
def test_a_database_password_is_masked_however_the_url_spells_it(url, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_DATABASE_URL", url)
    assert main(["config", "--json"]) == 0
    shown = values_of(capsys.readouterr().out)["database_url"]
    assert "hunter" not in str(shown) and "ter#2" not in str(shown) and "db.internal" in str(shown)


PASTED_KEY = "sk-proj-" + "Ab1Cd2Ef3Gh4" * 8  # the shape of a real OpenAI key, which the redaction rules know


def test_a_key_pasted_into_the_wrong_setting_is_never_printed_back(tmp_path, monkeypatch, capsys):
    config = tmp_path / "memory.toml"
    config.write_text(f'openai_api_key_file = "{PASTED_KEY}"\n')
    config.chmod(0o600)
    assert main(["--config", str(config), "config", "--json"]) == 0
    shown = capsys.readouterr().out
    assert "unusable: OPENAI_API_KEY_FILE" in shown and PASTED_KEY not in shown
    assert main(["--config", str(config), "config"]) == 0
    assert PASTED_KEY not in capsys.readouterr().out
    config.write_text(f'metrics_host = "{PASTED_KEY}"\n')
    assert main(["--config", str(config), "config"]) == 2
    refused = capsys.readouterr().err
    assert "MEMORY_METRICS_HOST must be a loopback address" in refused and PASTED_KEY not in refused


def test_an_unusable_key_file_is_reported_without_failing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(tmp_path / "missing"))
    assert main(["config", "--json"]) == 0
    assert str(values_of(capsys.readouterr().out)["openai_api_key"]).startswith("unusable: OPENAI_API_KEY_FILE")


def test_each_value_says_whether_it_came_from_the_default_the_environment_the_file_or_the_command_line(
    tmp_path, monkeypatch, capsys
):
    for variable in (*VARIABLES, "MEMORY_CONFIG", "VOYAGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    secret = tmp_path / "openai_key"
    secret.write_text(OPENAI_KEY)
    secret.chmod(0o600)
    config = tmp_path / "memory-server.toml"
    config.write_text(f'port = 9000\nlog_format = "json"\nweight_vector = 0.5\nopenai_api_key_file = "{secret}"\n')
    monkeypatch.setenv("MEMORY_PORT", "9100")
    monkeypatch.setenv("MEMORY_CONFIG", str(config))

    assert main(["--log-level", "debug", "config", "--json"]) == 0
    shown = capsys.readouterr().out
    values, origins = values_of(shown), origins_of(shown)

    assert (values["config"], origins["config"]) == (str(config), "env")
    assert (values["port"], origins["port"]) == (9100, "env")
    assert (values["log_format"], origins["log_format"]) == ("json", "file")
    assert (values["weight_vector"], origins["weight_vector"]) == (0.5, "file")
    assert (values["log_level"], origins["log_level"]) == ("debug", "command line")
    assert (values["host"], origins["host"]) == ("127.0.0.1", "default")
    assert (values["openai_api_key"], origins["openai_api_key"]) == (f"set, from file {secret}", "file")
    assert origins["voyage_api_key"] == "default" and OPENAI_KEY not in shown
    # every setting is shown, under its config file key
    assert {file_key(v) for v in VARIABLES} - {"voyage_api_key_file", "openai_api_key_file"} <= set(values)

    assert main(["--config", str(config), "config"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["config", str(config)] and line.endswith("(command line)") for line in table)
    assert any(line.split() == ["log_format", "json", "(file)"] for line in table)


def test_a_refused_config_file_stops_every_command_with_a_clear_message(tmp_path, capsys):
    config = tmp_path / "memory-server.toml"
    config.write_text(f'voyage_api_key = "{VOYAGE_KEY}"\n')
    assert main(["--config", str(config), "config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memory-server: configuration error: config file {config}: voyage_api_key is not accepted")
    assert VOYAGE_KEY not in err


def test_the_index_settings_and_each_indexs_own_values_are_shown_with_their_origin(tmp_path, monkeypatch, capsys):
    for variable in (*VARIABLES, "MEMORY_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    config = tmp_path / "memory-server.toml"
    config.write_text("chunk_tokens = 200\nmax_results = 5\n[indexes.team-docs]\nchunk_tokens = 128\n")
    config.chmod(0o600)
    monkeypatch.setenv("MEMORY_MIN_SCORE", "0.2")

    assert main(["--config", str(config), "config", "--json"]) == 0
    shown = capsys.readouterr().out
    values, origins = values_of(shown), origins_of(shown)

    assert (values["chunk_tokens"], origins["chunk_tokens"]) == (200, "file")
    assert (values["max_results"], origins["max_results"]) == (5, "file")
    assert (values["min_score"], origins["min_score"]) == (0.2, "env")
    assert (values["chunk_overlap"], origins["chunk_overlap"]) == (40, "default")
    assert (values["candidate_multiplier"], values["embedding_cache_entries"], values["extra_paths"]) == (1, 0, [])
    assert (values["indexes.team-docs.chunk_tokens"], origins["indexes.team-docs.chunk_tokens"]) == (128, "file")
    assert (values["indexes.team-docs.min_score"], origins["indexes.team-docs.min_score"]) == (0.2, "env")


def test_a_file_key_the_environment_overrides_is_named_in_a_warning_never_its_value(tmp_path, monkeypatch, caplog):
    for variable in (*VARIABLES, "MEMORY_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    config = tmp_path / "memory-server.toml"
    config.write_text('port = 9000\ndata_dir = "/srv/memory-CANARY"\nlog_level = "info"\n')
    config.chmod(0o600)
    for variable, value in {"MEMORY_PORT": "8765", "MEMORY_DATA_DIR": "/data", "MEMORY_KEYS_DIR": "/keys"}.items():
        monkeypatch.setenv(variable, value)  # what the image's Dockerfile sets

    with caplog.at_level(logging.WARNING):
        assert main(["--config", str(config), "config", "--json"]) == 0
    warned = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert sorted(warned) == [
        f"config file {config} sets data_dir, but MEMORY_DATA_DIR in the environment wins over it",
        f"config file {config} sets port, but MEMORY_PORT in the environment wins over it",
    ]
    assert not any("CANARY" in line or "9000" in line for line in warned)
