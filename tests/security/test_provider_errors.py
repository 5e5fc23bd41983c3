"""Finding 5: a provider's error text never reaches a caller, a search notice or a log. A fake provider echoes the
key back in every disguise (upper-cased, URL-encoded, base64, split over fields); only a fixed message with the
status code comes out."""

from __future__ import annotations

import base64
import json
import logging
import urllib.parse

import pytest

from server.index.embeddings.remote import HttpOptions, OpenAIEmbedder
from server.memory.service import CallerContext, MemoryService
from tests.fakes.provider_api import FakeProviderAPI, serve
from tests.server.index.test_remote_embeddings import _make

KEY = "sk-proj-Zq8XwV3mT7kLp2Rn9sYb4Hc6"
FAST = HttpOptions(timeout=2.0, max_retries=1, backoff=0.01, batch_size=16)
DISGUISES = {
    "as sent": KEY,
    "upper-cased": KEY.upper(),
    "url-encoded": urllib.parse.quote(KEY, safe=""),
    "base64": base64.b64encode(KEY.encode()).decode(),
    "split": KEY[:12] + '", "rest": "' + KEY[12:],
}
# What must never show: the key's secret part in any of its forms, and any tell-tale piece of the body.
FORBIDDEN = [
    KEY[8:],
    KEY[8:].upper(),
    base64.b64encode(KEY.encode()).decode()[8:],
    KEY[12:],
    "Zq8XwV",
    "provider says",
]


def echoing_body(disguise: str) -> bytes:
    return json.dumps({"error": {"message": f"provider says: bad key {DISGUISES[disguise]}"}, "detail": KEY}).encode()


def embedder(api: FakeProviderAPI, tokenizer) -> OpenAIEmbedder:
    return _make(OpenAIEmbedder, api, tokenizer, key=KEY, options=FAST)


@pytest.mark.parametrize("status", [400, 401, 429, 500])
@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_an_error_body_echoing_the_key_never_reaches_the_caller_or_the_log(tokenizer, caplog, disguise, status):
    with serve(FakeProviderAPI(api_key=KEY)) as api:
        api.fail(status, times=5, body=echoing_body(disguise))
        with caplog.at_level(logging.DEBUG), pytest.raises(Exception) as caught:
            embedder(api, tokenizer).embed(["hello"])
    message = str(caught.value)
    assert f"HTTP {status} (" in message
    for text in (message, caplog.text):
        for piece in FORBIDDEN:
            assert piece not in text, (disguise, piece)


def test_a_search_while_the_provider_fails_says_so_without_its_words(tmp_path, tokenizer, caplog):
    with serve(FakeProviderAPI(api_key=KEY)) as api:
        service = MemoryService(tmp_path / "data", embedder(api, tokenizer))
        caller = CallerContext("alice", "SHA256:a", {"proj": "rw"}, "proj", "rw")
        try:
            service.write(caller, "the deploy runbook\n", path="memory/a.md", mode="replace", expected_hash="absent")
            api.fail(401, times=50, body=echoing_body("upper-cased"))
            with caplog.at_level(logging.DEBUG):
                found = service.search(caller, "deploy runbook")
        finally:
            service.close()
    notice = found.model_dump_json()
    assert "HTTP 401 (the API key was refused)" in notice
    for text in (notice, caplog.text):
        for piece in FORBIDDEN:
            assert piece not in text
