"""Voyage and OpenAI providers against a local server speaking their wire format, and the fallback order."""

from __future__ import annotations

import logging
import shutil
import time

import numpy as np
import pytest

from server.index.embeddings.chain import ProviderChain
from server.index.embeddings.remote import HttpOptions, OpenAIEmbedder, VoyageEmbedder
from server.index.embeddings.select import EmbeddingSettings, read_secret, select_embedder, select_providers
from server.index.engine import MemoryIndex
from server.index.errors import EmbeddingError, InvalidArgumentError
from server.index.rerank import VoyageReranker
from tests.conftest import EXAMPLE
from tests.fakes.embedder import HashingEmbedder
from tests.fakes.provider_api import FakeProviderAPI, serve

KEY = "pa-test-0123456789abcdef0123456789"
FAST = HttpOptions(timeout=2.0, max_retries=2, backoff=0.01, batch_size=128)


@pytest.fixture
def api():
    with serve(FakeProviderAPI(api_key=KEY)) as running:
        yield running


def _make(kind, api, tokenizer, *, key=KEY, options=FAST, sleeps=None):
    return kind(
        api_key=key,
        model="test-model",
        dimensions=api.dimensions,
        base_url=api.url,
        tokenizer=tokenizer,
        max_tokens=8000,
        options=options,
        sleep=(sleeps.append if sleeps is not None else lambda _s: None),
    )


@pytest.mark.parametrize("kind", [VoyageEmbedder, OpenAIEmbedder])
def test_texts_are_batched_and_come_back_in_order_and_normalised(api, tokenizer, kind):
    embedder = _make(kind, api, tokenizer)
    texts = [f"note number {i} about topic {i % 7}" for i in range(300)]
    vectors = embedder.embed(texts)
    assert vectors.shape == (300, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert [len(r["input"]) for r in api.requests] == [128, 128, 44]
    # The fake answers in reverse order; the client must put every vector back in its input's place.
    again = embedder.embed([texts[5]])
    assert np.allclose(again[0], vectors[5], atol=1e-6)
    assert all(r["model"] == "test-model" for r in api.requests)


def test_voyage_is_told_documents_from_queries(api, tokenizer):
    embedder = _make(VoyageEmbedder, api, tokenizer)
    embedder.embed(["a document"])
    embedder.embed(["a question"], kind="query")
    assert [r["input_type"] for r in api.requests] == ["document", "query"]


def test_rate_limits_and_server_errors_are_retried_with_backoff(api, tokenizer):
    sleeps: list[float] = []
    embedder = _make(OpenAIEmbedder, api, tokenizer, sleeps=sleeps)
    api.fail(429, headers={"retry-after": "1.5"})
    api.fail(503)
    assert embedder.embed(["hello world"]).shape == (1, 64)
    assert len(sleeps) == 2
    assert 1.5 <= sleeps[0] <= 1.5 * 1.25  # the server's Retry-After wins over our own backoff
    assert 0.02 <= sleeps[1] <= 0.02 * 1.25  # second attempt: backoff doubled


def test_a_retry_after_longer_than_we_wait_gives_up_at_once_and_passes_it_on(api, tokenizer):
    sleeps: list[float] = []
    embedder = _make(OpenAIEmbedder, api, tokenizer, sleeps=sleeps)
    api.fail(429, times=10, headers={"retry-after": "7200"})
    with pytest.raises(EmbeddingError, match=r"HTTP 429 .*retry after 7200 s") as caught:
        embedder.embed(["hello"])
    assert caught.value.retry_after == 7200  # the breaker rests as long as it can, instead of a retry each minute
    assert sleeps == [] and api.failures[0].times == 9  # one request, no wait


def test_retries_give_up_with_a_clear_error(api, tokenizer):
    sleeps: list[float] = []
    embedder = _make(OpenAIEmbedder, api, tokenizer, sleeps=sleeps)
    api.fail(500, times=10)
    with pytest.raises(EmbeddingError, match=r"failed after 3 attempts: HTTP 500 \(the provider failed\)$"):
        embedder.embed(["hello"])
    assert len(sleeps) == 2


def test_client_errors_are_not_retried_and_never_carry_the_key(api, tokenizer, caplog):
    wrong = "sk-wrong-key-abcdefghijklmnopqrstuvwxyz"
    sleeps: list[float] = []
    embedder = _make(OpenAIEmbedder, api, tokenizer, key=wrong, sleeps=sleeps)
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as caught:
        embedder.embed(["hello"])
    assert str(caught.value) == "openai embeddings failed: HTTP 401 (the API key was refused)"
    assert sleeps == []
    for text in (str(caught.value), repr(embedder), caplog.text):
        assert wrong not in text and "sk-wrong" not in text


def test_a_stalled_server_times_out_and_is_retried(api, tokenizer):
    embedder = _make(VoyageEmbedder, api, tokenizer, options=HttpOptions(timeout=0.3, max_retries=1, backoff=0.01))
    api.fail(200, times=1, delay=1.0, body=b"{}")
    assert embedder.embed(["hello"]).shape == (1, 64)
    api.fail(200, times=2, delay=1.0, body=b"{}")
    with pytest.raises(EmbeddingError, match="timed out"):
        embedder.embed(["hello"])


def test_an_answer_dripping_in_slower_than_the_timeout_is_cut_off_at_the_timeout(api, tokenizer):
    embedder = _make(VoyageEmbedder, api, tokenizer, options=HttpOptions(timeout=0.3, max_retries=0))
    api.fail(200, body=b"{}" + b" " * 98, drip=0.05)  # each read waits 0.05 s; the whole answer would take 5 s
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"timed out after 0.3 s"):
        embedder.embed(["hello"])
    assert time.monotonic() - started < 2.0


def test_an_answer_larger_than_its_rows_could_need_is_refused_unread(api, tokenizer):
    embedder = _make(VoyageEmbedder, api, tokenizer)  # one vector of 64 numbers: a few kilobytes
    api.fail(200, body=b'{"data": [], "pad": "' + b"x" * 4 * 1024 * 1024 + b'"}')  # said in its Content-Length
    with pytest.raises(EmbeddingError, match=r"the answer is larger than \d+ bytes"):
        embedder.embed(["hello"])
    api.fail(200, flood=32 * 1024 * 1024)  # 32 MiB without a length: read until past the cap only
    with pytest.raises(EmbeddingError, match=r"the answer is larger than \d+ bytes"):
        embedder.embed(["hello"])
    assert embedder.embed(["hello"]).shape == (1, 64)


def test_a_connection_refused_is_a_clear_error(tokenizer):
    with serve(FakeProviderAPI(api_key=KEY)) as gone:
        pass  # the server is shut down: nothing listens on its port any more
    embedder = _make(OpenAIEmbedder, gone, tokenizer, options=HttpOptions(timeout=1, max_retries=1, backoff=0.01))
    with pytest.raises(EmbeddingError, match="network error"):
        embedder.embed(["hello"])


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        ("count", "malformed"),
        ("dimensions", "63 dimensions"),
        ("nan", "non-finite numbers"),
        ("indexes", "malformed"),
        ("json", "malformed"),
        ("zero", "a vector of zero length"),  # it would match no query, and once cached never be embedded again
        ("deep", "malformed"),  # nested past the JSON parser's depth
        ("overflow", "malformed"),  # a number no float holds
        ("gzip", r"after 3 attempts: network error \(DecodingError\)"),  # a body that is not the gzip it says
    ],
)
def test_malformed_responses_are_refused_whole(api, tokenizer, corrupt, message):
    api.corrupt = corrupt
    embedder = _make(OpenAIEmbedder, api, tokenizer)
    with pytest.raises(EmbeddingError, match=message):
        embedder.embed(["one text", "two texts", "three"])


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        ("indexes", "malformed rerank response"),
        ("deep", "malformed rerank response"),
        ("overflow", "malformed rerank response"),
        ("gzip", r"network error \(DecodingError\)"),
    ],
)
def test_malformed_rerank_answers_are_a_rerank_failure(api, corrupt, message):
    reranker = VoyageReranker(model="rerank-test", api_key=KEY, base_url=api.url, options=FAST, sleep=lambda _s: None)
    assert reranker.rerank("webhook retries", ["webhook retries", "lunch"]) == [1.0, 0.0]
    api.corrupt = corrupt
    with pytest.raises(EmbeddingError, match=message):
        reranker.rerank("webhook retries", ["webhook retries", "lunch"])


def test_a_model_answering_a_zero_vector_has_nothing_stored_and_its_chunks_wait(tmp_path):
    memory = tmp_path / "project" / "memory"
    memory.mkdir(parents=True)
    (memory / "rule.md").write_text("***\n")  # not a word in it: the hashing model's vector of it is all zeros
    index = MemoryIndex.open(tmp_path / "data", "zero", HashingEmbedder(), create=True)
    try:
        report = index.index(tmp_path / "project")
        assert report.chunks_written == 1 and report.chunks_pending == 1 and report.chunks_embedded == 0
        assert index.store.connection().execute("SELECT count(*) FROM embedding_cache").fetchall() == [(0,)]
    finally:
        index.close()


# selection and the fallback order ------------------------------------------------------------------------


def _env(api: FakeProviderAPI, **extra: str) -> dict[str, str]:
    return {"MEMORY_VOYAGE_BASE_URL": api.url, "MEMORY_OPENAI_BASE_URL": api.url, **extra}


def test_the_first_configured_provider_wins_and_reads_its_dimensions_by_probing(api):
    env = _env(api, MEMORY_EMBEDDING_PROVIDERS="voyage,local", VOYAGE_API_KEY=KEY, MEMORY_VOYAGE_MODEL="custom")
    embedder, reasons = select_embedder(EmbeddingSettings.from_env(env), env)
    assert embedder is not None and (embedder.provider, embedder.model, embedder.dimensions) == ("voyage", "custom", 64)
    assert reasons == [] and api.requests[0]["input"] == ["ping"]


def test_a_running_server_learns_a_custom_models_dimensions_by_probing_and_skips_it_when_the_probe_fails(api):
    env = _env(api, MEMORY_EMBEDDING_PROVIDERS="voyage", VOYAGE_API_KEY=KEY, MEMORY_VOYAGE_MODEL="custom")
    providers, reasons = select_providers(EmbeddingSettings.from_env(env), env)
    assert reasons == [] and [(m.provider, m.dimensions) for m in providers.members] == [("voyage", 64)]
    api.fail(503)
    providers, reasons = select_providers(EmbeddingSettings.from_env(env), env)
    assert providers.members == [] and reasons[0].startswith("voyage: voyage embeddings failed after 1 attempts")


def test_a_provider_without_a_key_or_that_fails_its_probe_falls_back_in_order(api, local_embedder):
    env = _env(api, MEMORY_EMBEDDING_PROVIDERS="openai,voyage,local", VOYAGE_API_KEY="pa-the-wrong-key-123456789")
    embedder, reasons = select_embedder(EmbeddingSettings.from_env(env), env)
    assert embedder is not None and embedder.provider == "local"
    assert reasons[0].startswith("openai: not configured (set OPENAI_API_KEY or OPENAI_API_KEY_FILE)")
    assert reasons[1].startswith("voyage: voyage embeddings failed: HTTP 401")
    assert not any("pa-the-wrong" in r for r in reasons)


def test_a_known_model_whose_api_answers_other_dimensions_is_refused(api):
    env = _env(api, MEMORY_EMBEDDING_PROVIDERS="openai,none", OPENAI_API_KEY=KEY)
    embedder, reasons = select_embedder(EmbeddingSettings.from_env(env), env)
    assert embedder is None
    assert "text-embedding-3-small answered with 64 dimensions, expected 1536" in reasons[0]
    assert reasons[1] == "none: keyword-only search was configured"


def test_keys_come_from_secret_files(api, tmp_path):
    secret = tmp_path / "openai_key"
    secret.write_text(KEY + "\n")
    secret.chmod(0o600)
    env = _env(api, MEMORY_EMBEDDING_PROVIDERS="openai", OPENAI_API_KEY_FILE=str(secret), MEMORY_OPENAI_DIMENSIONS="64")
    embedder, _ = select_embedder(EmbeddingSettings.from_env(env), env)
    assert embedder is not None and embedder.provider == "openai"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"two words\n", "exactly one key"),
        (b"\xff\xfe", "not UTF-8"),
        (b"k" * 5000, "too large"),
    ],
)
def test_bad_secret_files_are_clear_errors_that_do_not_show_the_secret(tmp_path, content, message):
    path = tmp_path / "secret"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        read_secret({"OPENAI_API_KEY_FILE": str(path)}, "OPENAI_API_KEY")
    assert "two words" not in str(caught.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMORY_EMBEDDING_PROVIDERS": "local,cohere"}, "unknown provider"),
        ({"MEMORY_EMBEDDING_PROVIDERS": " , "}, "is empty"),
        ({"MEMORY_EMBEDDING_PROVIDERS": "local,local"}, "twice"),
        ({"MEMORY_EMBEDDING_TIMEOUT": "soon"}, "must be a number"),
        ({"MEMORY_EMBEDDING_TIMEOUT": "nan"}, "out of range"),
        ({"MEMORY_EMBEDDING_BATCH": "0"}, "out of range"),
        ({"MEMORY_OPENAI_BASE_URL": "file:///etc/passwd"}, "http"),
        ({"MEMORY_EMBEDDING_PROBE": "maybe"}, "PROBE"),
    ],
)
def test_bad_embedding_settings_are_clear_errors(env, message):
    with pytest.raises(InvalidArgumentError, match=message):
        EmbeddingSettings.from_env(env)


@pytest.mark.parametrize(
    "url",
    [
        "http://api.voyageai.com",
        "http://gateway.internal/v1",
        "http://10.0.0.7:8080",
        "http://0.0.0.0:9",
        "http://user:hunter2-CANARY@gateway.example/v",
        "http://[fe80::1]/v",
        "http://[::1",  # malformed: no host to call loopback
    ],
)
@pytest.mark.parametrize("prefix", ["VOYAGE", "OPENAI"])
def test_a_plain_http_base_url_to_another_host_is_refused_without_echoing_it(prefix, url):
    with pytest.raises(InvalidArgumentError) as refused:
        EmbeddingSettings.from_env({f"MEMORY_{prefix}_BASE_URL": url})
    message = str(refused.value)
    assert message.startswith(f"MEMORY_{prefix}_BASE_URL must be an https:// URL") and "in clear" in message
    assert "hunter2" not in message and "gateway" not in message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080",
        "http://127.8.9.1/v1",
        "http://[::1]:8080/v1",
        "http://localhost:11434",
        "http://LOCALHOST",
        "https://gateway.internal/v1",
        "https://10.0.0.7:8443",
    ],
)
def test_https_anywhere_and_plain_http_to_this_machine_are_accepted(url):
    settings = EmbeddingSettings.from_env({"MEMORY_VOYAGE_BASE_URL": url, "MEMORY_OPENAI_BASE_URL": url})
    assert settings.voyage.base_url == settings.openai.base_url == url


def test_the_secret_file_wins_an_empty_one_falls_back_to_the_environment(tmp_path, caplog):
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.write_text("\n")
    full.write_text("from-file\n")
    full.chmod(0o600)
    fallback = {"VOYAGE_API_KEY": "from-env", "VOYAGE_API_KEY_FILE": str(empty)}
    assert read_secret(fallback, "VOYAGE_API_KEY") == "from-env"
    assert read_secret({"VOYAGE_API_KEY_FILE": str(empty)}, "VOYAGE_API_KEY") is None
    with caplog.at_level(logging.WARNING):
        both = {"VOYAGE_API_KEY": "from-env", "VOYAGE_API_KEY_FILE": str(full)}
        assert read_secret(both, "VOYAGE_API_KEY") == "from-file"
    assert "using the file" in caplog.text and "from-" not in caplog.text
    with pytest.raises(InvalidArgumentError, match="without spaces"):
        read_secret({"VOYAGE_API_KEY": "two words"}, "VOYAGE_API_KEY")


def test_an_index_built_on_a_remote_provider_searches_hybrid(api, tmp_path):
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    env = _env(api, MEMORY_EMBEDDING_PROVIDERS="voyage", VOYAGE_API_KEY=KEY, MEMORY_VOYAGE_DIMENSIONS="64")
    embedder, _ = select_embedder(EmbeddingSettings.from_env(env), env)
    assert embedder is not None
    now = [0.0]
    index = MemoryIndex.open(
        tmp_path / "data", "remote", ProviderChain.of([embedder], clock=lambda: now[0]), create=True
    )
    try:
        report = index.index(folder)
        assert report.chunks_embedded == report.chunks_written > 0
        result = index.search("webhook retries idempotent processed events")
        assert result.mode == "hybrid" and result.hits[0].path == "memory/2026-11-18.md"
        assert index.status().provider == "voyage"
        assert api.requests[-1]["input_type"] == "query"
        # The server goes down: indexing keeps the text and leaves the vectors pending, search still answers.
        api.fail(503, times=100)
        (folder / "memory" / "2026-11-21.md").write_text("# 2026-11-21\n\n- Moved the cron to UTC.\n")
        assert index.index(folder).chunks_pending == 1
        assert index.search("cron UTC").hits[0].path == "memory/2026-11-21.md"
        api.failures.clear()
        assert index.embed_pending() == 0  # the breaker rests the provider before the next try
        now[0] += 60
        assert index.embed_pending() == 1 and index.status().pending_vectors == 0
    finally:
        index.close()
