"""The server's settings: the environment over an optional TOML config file, every key and type checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from server.index.errors import InvalidArgumentError
from server.index.tuning import SearchDefaults
from server.settings import VARIABLES, Settings, file_key

SECRET = "pa-CANARY-not-for-config-files"

# A valid value of the right TOML type for every key; a new setting must add one (see the first test).
SAMPLES = {
    "data_dir": '"/srv/memory/data"',
    "keys_dir": '"/srv/memory/keys"',
    "host": '"::1"',
    "port": "9000",
    "log_level": '"debug"',
    "log_format": '"json"',
    "metrics_host": '"127.0.0.1"',
    "metrics_port": "9100",
    "embedding_providers": '["openai", "none"]',
    "embedding_probe": "false",
    "embedding_timeout": "2.5",
    "embedding_retries": "0",
    "embedding_batch": "16",
    "embedding_failover_after": "120",
    "embedding_runtime": '"torch"',
    "local_model": '"all-MiniLM-L6-v2"',
    "voyage_model": '"voyage-3"',
    "voyage_base_url": '"http://127.0.0.1:8080/voyage"',
    "voyage_dimensions": "512",
    "openai_model": '"text-embedding-3-large"',
    "openai_base_url": '"https://gateway.internal/openai"',
    "openai_dimensions": "3072",
    "weight_vector": "0.6",
    "weight_keyword": "1",
    "max_file_bytes": "1000",
    "chunk_tokens": "128",
    "chunk_overlap": "16",
    "max_results": "5",
    "min_score": "0.25",
    "candidate_multiplier": "6",
    "feedback_weight": "0.5",
    "mmr_lambda": "0.7",
    "recency_half_life_days": "30",
    "rerank": "true",
    "rerank_model": '"rerank-2"',
    "embedding_cache_entries": "10000",
    "extra_paths": '["notes", "decisions"]',
    "history_days": "7",
    "history_max_days": "365",
    "redact_writes": "false",
    "database_url": '"postgresql://memory@db.internal/memory"',
    "voyage_api_key_file": '"/run/secrets/voyage"',
    "openai_api_key_file": '"/run/secrets/openai"',
}


def config(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "memory-server.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_every_setting_has_a_config_file_key_and_each_sample_is_read_from_the_file(tmp_path):
    assert set(SAMPLES) == {file_key(variable) for variable in VARIABLES}
    path = config(tmp_path, "".join(f"{key} = {value}\n" for key, value in SAMPLES.items()))

    settings = Settings.from_env({}, config_file=path)

    assert set(settings.origins.values()) == {"file"} and settings.config_file == path
    assert (settings.data_dir, settings.keys_dir) == (Path("/srv/memory/data"), Path("/srv/memory/keys"))
    assert (settings.host, settings.port, settings.metrics_port) == ("::1", 9000, 9100)
    assert (settings.log_level, settings.log_format) == ("debug", "json")
    assert settings.redact_writes is False and Settings.from_env({}).redact_writes is True
    embedding = settings.embedding
    assert embedding.providers == ("openai", "none") and embedding.probe is False
    assert (embedding.runtime, embedding.local_model) == ("torch", "all-MiniLM-L6-v2")
    assert (embedding.http.timeout, embedding.http.max_retries, embedding.http.batch_size) == (2.5, 0, 16)
    assert embedding.voyage.dimensions == 512 and embedding.openai.model == "text-embedding-3-large"
    assert (settings.engine.weights.vector, settings.engine.weights.keyword) == (0.6, 1.0)
    assert settings.engine.scan.max_file_bytes == 1000
    assert (settings.engine.chunker.max_tokens, settings.engine.chunker.overlap_tokens) == (128, 16)
    assert settings.engine.search == SearchDefaults(
        max_results=5,
        min_score=0.25,
        candidate_multiplier=6,
        feedback_weight=0.5,
        mmr_lambda=0.7,
        recency_half_life_days=30,
        rerank=True,
    )
    assert settings.rerank_model == "rerank-2" and Settings.from_env({}).rerank_model == "rerank-2-lite"
    assert settings.engine.cache_max_entries == 10000
    assert settings.extra_paths == ("notes", "decisions")
    assert (settings.history.all_days, settings.history.max_days) == (7, 365)
    assert (
        settings.database_url == "postgresql://memory@db.internal/memory" and Settings.from_env({}).database_url is None
    )
    assert settings.key_files == {
        "VOYAGE_API_KEY_FILE": "/run/secrets/voyage",
        "OPENAI_API_KEY_FILE": "/run/secrets/openai",
    }


def test_a_database_url_must_name_postgresql():
    with pytest.raises(InvalidArgumentError, match="MEMORY_DATABASE_URL must be a postgresql:// URL"):
        Settings.from_env({"MEMORY_DATABASE_URL": "mysql://memory@db/memory"})


def test_the_environment_wins_over_the_file_and_an_empty_variable_counts_as_unset(tmp_path):
    path = config(tmp_path, 'port = 9000\nlog_level = "info"\nembedding_providers = "voyage, local"\n')
    env = {"MEMORY_CONFIG": str(path), "MEMORY_PORT": "9100", "MEMORY_LOG_LEVEL": "  "}

    settings = Settings.from_env(env)

    assert settings.port == 9100 and settings.origins["port"] == "env"
    assert settings.log_level == "info" and settings.origins["log_level"] == "file"
    assert settings.embedding.providers == ("voyage", "local")
    assert settings.host == "127.0.0.1" and settings.origins["host"] == "default"
    assert Settings.from_env({"MEMORY_CONFIG": ""}).config_file is None  # compose's empty pass-through


def test_the_command_line_file_is_used_instead_of_memory_config(tmp_path):
    named = config(tmp_path, "port = 9001\n")
    assert Settings.from_env({"MEMORY_CONFIG": str(tmp_path / "absent.toml")}, config_file=named).port == 9001


def test_relative_paths_in_the_file_are_taken_from_its_folder(tmp_path):
    path = config(tmp_path, 'data_dir = "data"\nkeys_dir = "/abs/keys"\nvoyage_api_key_file = "secrets/voyage"\n')
    settings = Settings.from_env({}, config_file=path)
    assert settings.data_dir == tmp_path / "data" and settings.keys_dir == Path("/abs/keys")
    assert settings.key_files["VOYAGE_API_KEY_FILE"] == str(tmp_path / "secrets" / "voyage")


def test_a_provider_key_configured_in_the_environment_wins_over_the_files_key_file(tmp_path):
    path = config(
        tmp_path, 'voyage_api_key_file = "/run/secrets/voyage"\nopenai_api_key_file = "/run/secrets/openai"\n'
    )
    settings = Settings.from_env({"VOYAGE_API_KEY": "from-env", "OPENAI_API_KEY_FILE": ""}, config_file=path)
    assert settings.key_files == {"OPENAI_API_KEY_FILE": "/run/secrets/openai"}
    sources = settings.key_sources({"VOYAGE_API_KEY": "from-env"})
    assert sources["VOYAGE_API_KEY"] == "from-env" and "VOYAGE_API_KEY_FILE" not in sources
    assert sources["OPENAI_API_KEY_FILE"] == "/run/secrets/openai"
    assert settings.origins["voyage_api_key_file"] == "file"  # the path was read, and loses to the key itself


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prot = 9000\n", "unknown key 'prot'; did you mean 'port'?"),
        ("[server]\nport = 9000\n", "unknown key 'server'"),
        ('port = "9000"\n', "port must be an integer, not a string"),
        ("port = 9000.0\n", "port must be an integer, not a float"),
        ("embedding_probe = 1\n", "embedding_probe must be true or false, not an integer"),
        ("weight_vector = true\n", "weight_vector must be a number, not a boolean"),
        ("embedding_providers = [1, 2]\n", "embedding_providers must be a list of strings"),
        ('host = ""\n', "host is empty; leave it out for the default"),
        ("data_dir = 2026-11-23\n", "data_dir must be a string (a path; "),
    ],
)
def test_unknown_keys_and_wrong_types_are_refused_naming_the_file_and_key(tmp_path, text, message):
    path = config(tmp_path, text)
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    assert str(refused.value).startswith(f"config file {path}: ") and message in str(refused.value)


@pytest.mark.parametrize("key", ["voyage_api_key", "openai_api_key"])
def test_an_api_key_itself_is_refused_and_never_echoed(tmp_path, key):
    path = config(tmp_path, f'{key} = "{SECRET}"\n')
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    assert f"{key} is not accepted in a config file" in str(refused.value)
    assert f"set {key}_file to its path" in str(refused.value) and SECRET not in str(refused.value)


def test_a_misplaced_secret_is_not_echoed_in_a_type_error_either(tmp_path):
    path = config(tmp_path, f'port = "{SECRET}"\n')
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_config_file_that_group_or_others_may_change_is_refused(tmp_path, mode):
    path = config(tmp_path, "port = 9000\n", mode=mode)
    with pytest.raises(InvalidArgumentError, match=rf"refusing config file .*mode 0{mode:o}.*chmod go-w {path}"):
        Settings.from_env({}, config_file=path)
    path.chmod(0o644)  # readable by all is fine: secrets are never in it
    assert Settings.from_env({}, config_file=path).port == 9000


def test_a_missing_broken_or_odd_file_is_a_clear_error(tmp_path):
    cases = {
        tmp_path / "absent.toml": "does not exist",
        config(tmp_path, "port = = 1\n"): "not valid TOML: ",
        tmp_path: "is not a regular file",
    }
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"port = 1 # \xff\n")
    cases[binary] = "not UTF-8 text"
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 10_000)
    cases[big] = "larger than"
    for path, message in cases.items():
        with pytest.raises(InvalidArgumentError, match=message):
            Settings.from_env({}, config_file=path)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgumentError, match="not a regular file"):
        Settings.from_env({}, config_file=fifo)  # and it did not hang


def test_a_bad_value_from_the_file_says_where_it_was_set(tmp_path):
    path = config(tmp_path, "port = 70000\n")
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    assert str(refused.value) == f"MEMORY_PORT must be a TCP port (0-65535) (set as port in {path})"
    with pytest.raises(InvalidArgumentError) as from_env:
        Settings.from_env({"MEMORY_PORT": "70000"}, config_file=path)
    assert "(set as" not in str(from_env.value)


def test_log_level_and_format_are_checked():
    assert Settings.from_env({"MEMORY_LOG_FORMAT": "JSON", "MEMORY_LOG_LEVEL": "Info"}).log_format == "json"
    with pytest.raises(InvalidArgumentError, match="MEMORY_LOG_FORMAT must be one of text, json"):
        Settings.from_env({"MEMORY_LOG_FORMAT": "logfmt"})
    with pytest.raises(InvalidArgumentError, match="MEMORY_LOG_LEVEL must be one of"):
        Settings.from_env({"MEMORY_LOG_LEVEL": "verbose"})


def test_the_metrics_listener_is_off_by_default_and_only_ever_on_loopback():
    assert Settings.from_env({}).metrics_port is None
    on = Settings.from_env({"MEMORY_METRICS_PORT": "9100", "MEMORY_METRICS_HOST": "::1"})
    assert (on.metrics_host, on.metrics_port) == ("::1", 9100)
    for host in ("0.0.0.0", "::", "192.168.1.10", "metrics.example"):
        with pytest.raises(InvalidArgumentError, match="MEMORY_METRICS_HOST must be a loopback address"):
            Settings.from_env({"MEMORY_METRICS_PORT": "9100", "MEMORY_METRICS_HOST": host})
    with pytest.raises(InvalidArgumentError, match="MEMORY_METRICS_PORT must be a TCP port"):
        Settings.from_env({"MEMORY_METRICS_PORT": "http"})


# the index's settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMORY_CHUNK_TOKENS": "32"}, "MEMORY_CHUNK_TOKENS must be a whole number from 64 to 2048"),
        ({"MEMORY_CHUNK_TOKENS": "4096"}, "MEMORY_CHUNK_TOKENS must be a whole number from 64 to 2048"),
        ({"MEMORY_CHUNK_TOKENS": "big"}, "MEMORY_CHUNK_TOKENS must be a whole number from 64 to 2048"),
        ({"MEMORY_CHUNK_OVERLAP": "-1"}, "MEMORY_CHUNK_OVERLAP must be a whole number from 0 to 2048"),
        (
            {"MEMORY_CHUNK_TOKENS": "128", "MEMORY_CHUNK_OVERLAP": "64"},
            "MEMORY_CHUNK_OVERLAP must be less than half of MEMORY_CHUNK_TOKENS (128), not 64",
        ),
        ({"MEMORY_MAX_RESULTS": "0"}, "MEMORY_MAX_RESULTS must be a whole number from 1 to 50"),
        ({"MEMORY_MAX_RESULTS": "51"}, "MEMORY_MAX_RESULTS must be a whole number from 1 to 50"),
        ({"MEMORY_MIN_SCORE": "1.5"}, "MEMORY_MIN_SCORE must be a number from 0 to 1"),
        ({"MEMORY_MIN_SCORE": "high"}, "MEMORY_MIN_SCORE must be a number from 0 to 1"),
        ({"MEMORY_MMR_LAMBDA": "nan"}, "MEMORY_MMR_LAMBDA must be a number from 0 to 1"),
        ({"MEMORY_FEEDBACK_WEIGHT": "2"}, "MEMORY_FEEDBACK_WEIGHT must be a number from 0 to 1"),
        ({"MEMORY_RECENCY_HALF_LIFE_DAYS": "-1"}, "MEMORY_RECENCY_HALF_LIFE_DAYS must be a number from 0 to 36500"),
        ({"MEMORY_RERANK": "maybe"}, "MEMORY_RERANK must be 1 or 0"),
        ({"MEMORY_CANDIDATE_MULTIPLIER": "0"}, "MEMORY_CANDIDATE_MULTIPLIER must be a whole number from 1 to 20"),
        (
            {"MEMORY_EMBEDDING_CACHE_ENTRIES": "-5"},
            "MEMORY_EMBEDDING_CACHE_ENTRIES must be a whole number of at least 0",
        ),
    ],
)
def test_the_index_settings_are_checked_with_an_error_naming_the_variable(env, message):
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env(env)
    assert str(refused.value).startswith(message)


def test_an_index_setting_from_the_file_is_checked_naming_its_key_and_the_environment_wins(tmp_path):
    path = config(tmp_path, "chunk_tokens = 10\n")
    with pytest.raises(InvalidArgumentError, match=r"from 64 to 2048 \(set as chunk_tokens in "):
        Settings.from_env({}, config_file=path)
    settings = Settings.from_env({"MEMORY_CHUNK_TOKENS": "200"}, config_file=path)
    assert settings.engine.chunker.max_tokens == 200 and settings.origins["chunk_tokens"] == "env"
    assert Settings.from_env({}).engine.chunker.max_tokens == 254  # the default: what the local model reads


def test_an_index_may_have_its_own_chunking_and_search_defaults_in_the_file(tmp_path):
    path = config(
        tmp_path,
        "min_score = 0.1\n[indexes.team-docs]\nchunk_tokens = 128\nchunk_overlap = 8\nmax_results = 3\n",
    )
    settings = Settings.from_env({}, config_file=path)
    team = settings.engine.for_index("team-docs")
    assert (team.chunker.max_tokens, team.chunker.overlap_tokens) == (128, 8)
    assert (team.search.max_results, team.search.min_score) == (3, 0.1)  # the global min_score carries over
    assert settings.engine.for_index("other") is settings.engine
    assert settings.engine.chunker.max_tokens == 254


def test_an_index_may_turn_on_diversity_recency_and_reranking_and_the_reranker_reaches_every_index(tmp_path):
    path = config(
        tmp_path, "[indexes.logs]\nmmr_lambda = 0.7\nrecency_half_life_days = 14\nrerank = true\n[indexes.docs]\n"
    )
    settings = Settings.from_env({"MEMORY_MIN_SCORE": "0.2"}, config_file=path)
    logs = settings.engine.for_index("logs").search
    assert (logs.mmr_lambda, logs.recency_half_life_days, logs.rerank, logs.min_score) == (0.7, 14, True, 0.2)
    assert settings.engine.search.rerank is False and settings.engine.for_index("docs").search.mmr_lambda == 1.0
    assert settings.with_reranker({}).engine.reranker is None  # no Voyage key: none
    served = settings.with_reranker({"VOYAGE_API_KEY": "pa-test-key"})
    rerankers = {served.engine.for_index(name).reranker for name in ("logs", "docs", "other")}
    assert len(rerankers) == 1 and None not in rerankers
    assert "pa-test-key" not in repr(served.engine.reranker.inner)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[indexes.team]\nport = 1\n", "unknown key 'indexes.team.port'; an index may set chunk_tokens,"),
        ("[indexes.Team]\nchunk_tokens = 128\n", "[indexes.Team] does not name an index"),
        ('[indexes.team]\nchunk_tokens = "128"\n', "indexes.team.chunk_tokens must be an integer"),
        ("indexes = 3\n", "indexes must be tables"),
        ("[indexes.team]\nchunk_tokens = 100000\n", "from 64 to 2048 (set as indexes.team.chunk_tokens in "),
        ("[indexes.team]\nchunk_overlap = 200\n", "less than half of MEMORY_CHUNK_TOKENS (254), not 200 (set as"),
        ("[indexes.team]\nrerank = 1\n", "indexes.team.rerank must be true or false"),
        ("[indexes.team]\nmmr_lambda = 2\n", "MEMORY_MMR_LAMBDA must be a number from 0 to 1 (set as"),
        ("[indexes.team]\nrecency_half_life_days = -3\n", "number from 0 to 36500 (set as indexes.team"),
    ],
)
def test_a_bad_index_table_is_refused_naming_the_index_and_key(tmp_path, text, message):
    path = config(tmp_path, text)
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    assert message in str(refused.value) and str(path) in str(refused.value)


def test_extra_paths_are_checked_naming_the_key_and_become_scan_rules(tmp_path):
    settings = Settings.from_env({"MEMORY_EXTRA_PATHS": "notes, decisions"})
    assert settings.extra_paths == ("notes", "decisions")
    scan = settings.engine.scan
    assert scan.source_of("notes/a/b.md") == "memory" and scan.source_of("decisions/x.md") == "memory"
    assert scan.source_of("drafts/x.md") is None and Settings.from_env({}).extra_paths == ()
    with pytest.raises(InvalidArgumentError, match=r"MEMORY_EXTRA_PATHS: 'memory' cannot be a memory folder"):
        Settings.from_env({"MEMORY_EXTRA_PATHS": "memory"})
    path = config(tmp_path, 'extra_paths = ["docs/adr"]\n')
    with pytest.raises(InvalidArgumentError, match=r"one folder name beside memory/.*\(set as extra_paths in "):
        Settings.from_env({}, config_file=path)


# numbers, bounds and what an error may show --------------------------------------------------------------------

HEX_KEY = "3f9c2a7be1d04c5a8e6f0b9d2c7a4e11"  # the shape of an Azure OpenAI key: 32 hex digits
DIGIT_KEY = "40518273946150382716493827105563"  # a secret of digits only reads as a (huge) number


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMORY_WEIGHT_VECTOR": "nan"}, "MEMORY_WEIGHT_VECTOR must be a finite number of at least 0"),
        ({"MEMORY_WEIGHT_KEYWORD": "inf"}, "MEMORY_WEIGHT_KEYWORD must be a finite number of at least 0"),
        ({"MEMORY_WEIGHT_VECTOR": "-inf"}, "MEMORY_WEIGHT_VECTOR must be a finite number of at least 0"),
        ({"MEMORY_MAX_FILE_BYTES": "inf"}, "MEMORY_MAX_FILE_BYTES must be a whole number of at least 1"),
        ({"MEMORY_MAX_FILE_BYTES": "nan"}, "MEMORY_MAX_FILE_BYTES must be a whole number of at least 1"),
        ({"MEMORY_HISTORY_DAYS": "1e400"}, "MEMORY_HISTORY_DAYS must be a whole number from 0 to 36500"),
        (
            {"MEMORY_WEIGHT_VECTOR": "0", "MEMORY_WEIGHT_KEYWORD": "0"},
            "MEMORY_WEIGHT_VECTOR and MEMORY_WEIGHT_KEYWORD must not both be 0",
        ),
    ],
)
def test_a_number_that_is_not_finite_or_weights_that_are_both_zero_are_the_settings_one_line_error(env, message):
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env(env)
    assert str(refused.value) == message


@pytest.mark.parametrize("text", ["weight_vector = nan\n", "weight_keyword = inf\n", "weight_vector = -inf\n"])
def test_a_not_finite_weight_from_the_file_is_refused_naming_its_key(tmp_path, text):
    path = config(tmp_path, text)
    with pytest.raises(InvalidArgumentError, match=r"must be a finite number of at least 0 \(set as weight_"):
        Settings.from_env({}, config_file=path)


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("MEMORY_MAX_FILE_BYTES", "0.9"),
        ("MEMORY_MAX_FILE_BYTES", "0"),
        ("MEMORY_MAX_FILE_BYTES", "1e6"),
        ("MEMORY_HISTORY_DAYS", "0.5"),
        ("MEMORY_HISTORY_DAYS", "7.9"),
        ("MEMORY_HISTORY_MAX_DAYS", "1e18"),
    ],
)
def test_a_whole_number_setting_given_as_a_decimal_is_refused_not_truncated(variable, raw):
    with pytest.raises(InvalidArgumentError, match=f"^{variable} must be a whole number "):
        Settings.from_env({variable: raw})


def test_history_beyond_a_century_is_refused_at_start_and_a_century_still_lets_every_write_through(tmp_path):
    from server.mirror.mirror import Mirror
    from server.settings import MAX_HISTORY_DAYS

    for variable in ("MEMORY_HISTORY_DAYS", "MEMORY_HISTORY_MAX_DAYS"):
        with pytest.raises(InvalidArgumentError, match=f"^{variable} must be a whole number from 0 to 36500$"):
            Settings.from_env({variable: "1000000"})
    longest = Settings.from_env(
        {"MEMORY_HISTORY_DAYS": str(MAX_HISTORY_DAYS), "MEMORY_HISTORY_MAX_DAYS": str(MAX_HISTORY_DAYS)}
    )
    mirror = Mirror(tmp_path / "idx", retention=longest.history)
    try:
        mirror.write("memory/a.md", "hello\n", caller="alice")
    finally:
        mirror.close()
    assert (tmp_path / "idx" / "files" / "memory" / "a.md").read_text() == "hello\n"


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("MEMORY_MAX_RESULTS", "--5"),
        ("MEMORY_CHUNK_TOKENS", "--128"),
        ("MEMORY_EMBEDDING_CACHE_ENTRIES", "--5"),
        ("MEMORY_HISTORY_DAYS", "-+5"),
        ("MEMORY_PORT", "9" * 5000),
        ("MEMORY_METRICS_PORT", "--9100"),
        ("MEMORY_MAX_RESULTS", "9" * 5000),
        ("MEMORY_MAX_FILE_BYTES", "-" + "9" * 5000),
    ],
)
def test_a_doubled_minus_or_thousands_of_digits_is_the_settings_one_line_error(variable, raw):
    with pytest.raises(InvalidArgumentError, match=f"^{variable} must be a "):
        Settings.from_env({variable: raw})


ECHO_CHECKED = [
    "MEMORY_METRICS_HOST",
    "MEMORY_PORT",
    "MEMORY_METRICS_PORT",
    "MEMORY_WEIGHT_VECTOR",
    "MEMORY_WEIGHT_KEYWORD",
    "MEMORY_MAX_FILE_BYTES",
    "MEMORY_HISTORY_DAYS",
    "MEMORY_HISTORY_MAX_DAYS",
    "MEMORY_CHUNK_TOKENS",
    "MEMORY_CHUNK_OVERLAP",
    "MEMORY_MAX_RESULTS",
    "MEMORY_MIN_SCORE",
    "MEMORY_CANDIDATE_MULTIPLIER",
    "MEMORY_FEEDBACK_WEIGHT",
    "MEMORY_MMR_LAMBDA",
    "MEMORY_RECENCY_HALF_LIFE_DAYS",
    "MEMORY_RERANK",
    "MEMORY_EMBEDDING_CACHE_ENTRIES",
    "MEMORY_EMBEDDING_TIMEOUT",
    "MEMORY_EMBEDDING_RETRIES",
    "MEMORY_EMBEDDING_BATCH",
    "MEMORY_EMBEDDING_FAILOVER_AFTER",
    "MEMORY_VOYAGE_DIMENSIONS",
    "MEMORY_OPENAI_DIMENSIONS",
]


@pytest.mark.parametrize(
    ("variable", "secret"),
    [(variable, HEX_KEY) for variable in ECHO_CHECKED]
    + [(variable, DIGIT_KEY) for variable in ECHO_CHECKED if "_WEIGHT_" not in variable],  # a weight may be 4e31
)
def test_a_secret_pasted_into_a_setting_is_never_echoed_in_its_error(variable, secret):
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({variable: secret})
    assert variable in str(refused.value) and secret not in str(refused.value)


@pytest.mark.parametrize("secret", [HEX_KEY, DIGIT_KEY])
def test_a_secret_pasted_into_a_setting_of_the_file_is_never_echoed_in_its_error(tmp_path, secret):
    path = config(tmp_path, f'metrics_host = "{secret}"\n')
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    assert "(set as metrics_host in " in str(refused.value) and secret not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://memory:Hunter2-very-secret@db:5432/memory",
        "postgresql://memory:hun?ter#2@db.internal/memory",
        "postgresql://db.internal/memory?user=memory&password=Hunter2",
        "postgres://memory@db.internal/memory?sslmode=verify-full&sslpassword=Hunter2",
    ],
)
def test_a_database_password_in_the_config_file_is_refused_pointing_to_the_environment(tmp_path, url):
    path = config(tmp_path, f'database_url = "{url}"\n', mode=0o644)
    with pytest.raises(InvalidArgumentError) as refused:
        Settings.from_env({}, config_file=path)
    message = str(refused.value)
    assert message.startswith(f"config file {path}: database_url holds a password") and "MEMORY_DATABASE_URL" in message
    assert "Hunter2" not in message and "ter#2" not in message
    assert Settings.from_env({"MEMORY_DATABASE_URL": url}).database_url == url  # the environment may hold it


def test_a_database_url_without_a_password_is_accepted_from_the_file(tmp_path):
    url = "postgresql://memory@db.internal/memory?sslmode=verify-full&password="
    path = config(tmp_path, f'database_url = "{url}"\n')
    assert Settings.from_env({}, config_file=path).database_url == url


def test_the_keys_the_environment_overrides_in_the_file_are_named_with_their_variable(tmp_path):
    path = config(tmp_path, 'port = 9000\ndata_dir = "/srv/memory"\nlog_level = "info"\nvoyage_api_key_file = "k"\n')
    env = {"MEMORY_PORT": "8765", "MEMORY_DATA_DIR": "/data", "MEMORY_LOG_LEVEL": " ", "VOYAGE_API_KEY": "pa-x"}
    settings = Settings.from_env(env, config_file=path)
    assert settings.overridden == {
        "port": "MEMORY_PORT",
        "data_dir": "MEMORY_DATA_DIR",
        "voyage_api_key_file": "VOYAGE_API_KEY",
    }
    assert Settings.from_env({}, config_file=path).overridden == {}
