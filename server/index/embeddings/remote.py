"""Voyage and OpenAI embeddings over HTTP: batched, retried with backoff on 429/5xx, bounded in time and size.

The API key lives only in this process (read from the server's environment or a secret file by `select`), is sent
only in the Authorization header, and is scrubbed from every error message before it can reach a log or a client.
A provider's answer is read as a stream: the whole of it must arrive within the request's timeout and stay under a
size that its rows could need (`answer_cap`), so a gateway that drips or floods holds no search and no memory.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
import numpy as np

from server.index.embeddings.base import InputKind, Tokenizer, Vectors, normalise, unusable
from server.index.errors import EmbeddingError

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 60.0  # the longest wait between two attempts; a provider asking for longer is not retried
# What a 200 answer may weigh (`answer_cap`), generous: a number pretty-printed one to a line, as OpenAI does.
ANSWER_SLACK = 64 * 1024  # bytes besides the rows: the envelope, usage counts, whitespace
ROW_BYTES = 512  # a row's own keys and indentation ("object", "index") besides its numbers
NUMBER_BYTES = 48  # one number with its indentation and comma ("        -1.2345678901234567e-05,\n" is 34)
PROBE_DIMENSIONS = 16_384  # the numbers a probe's one row may carry while a model's dimensions are unknown
# A 200 answer that cannot be read as the rows asked for. RecursionError: JSON nested deeper than the parser goes;
# OverflowError: a number too large for a float.
MALFORMED = (ValueError, KeyError, TypeError, RecursionError, OverflowError)


@dataclass(frozen=True)
class HttpOptions:
    timeout: float = 30.0  # seconds of each connect, read and write, and of a request's whole answer
    max_retries: int = 4  # extra attempts after the first, on 429/5xx/network errors
    backoff: float = 0.5  # first retry delay in seconds; doubles each attempt, with jitter
    batch_size: int = 128  # inputs per request


class ProviderApi:
    """One provider's JSON API over HTTP: the key in the Authorization header only, and a POST retried with backoff
    on 429/5xx and network errors. The embedders and the reranker (`server.index.rerank`) share it."""

    provider = "http"
    path = "/v1/embeddings"
    what = "embeddings"  # named in errors: "voyage embeddings failed: ..."

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        options: HttpOptions | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not api_key or any(c.isspace() for c in api_key):
            raise EmbeddingError(f"{self.provider}: the API key is empty or contains whitespace")
        self.options = options or HttpOptions()
        self._api_key = api_key
        self._sleep = sleep
        self._url = base_url.rstrip("/") + self.path
        self._client = httpx2.Client(
            timeout=httpx2.Timeout(self.options.timeout),
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
            follow_redirects=False,
        )

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(url={self._url!r})"

    def close(self) -> None:
        self._client.close()

    def post(self, body: dict[str, Any], retries: int, max_bytes: int) -> Any:
        """The JSON document of the 200 answer to `body`, after at most `retries` retries; EmbeddingError (no key,
        no provider body) on failure, and at once for an answer over `max_bytes` or one that is not JSON."""
        payload = json.dumps(body).encode()
        attempt = 0
        while True:
            try:
                status, retry_header, content = self._exchange(payload, max_bytes)
            except (httpx2.TimeoutException, _Overdue):
                failure, retry_after = f"timed out after {self.options.timeout:g} s", None
            except httpx2.RequestError as exc:  # the connection, the protocol, a body that does not decode
                failure, retry_after = f"network error ({type(exc).__name__})", None
            else:
                if status == 200:
                    try:
                        return json.loads(content)
                    except MALFORMED:
                        raise self.malformed() from None
                failure = provider_failure(status)  # never the provider's body: it may echo the key
                if status not in RETRY_STATUSES:
                    raise EmbeddingError(f"{self.provider} {self.what} failed: {failure}", refused=status in (401, 403))
                retry_after = _retry_after(retry_header)
                if retry_after is not None and retry_after > MAX_RETRY_AFTER:
                    # Asked to wait longer than we would hold a caller: give up now, and the breaker rests that long.
                    raise EmbeddingError(
                        f"{self.provider} {self.what} failed: {failure}, retry after {retry_after:g} s",
                        retry_after=retry_after,
                    )
            if attempt >= retries:
                raise EmbeddingError(
                    f"{self.provider} {self.what} failed after {attempt + 1} attempts: {failure}",
                    retry_after=retry_after,
                )
            delay = retry_after if retry_after is not None else self.options.backoff * 2**attempt
            delay = min(delay * random.uniform(1.0, 1.25), MAX_RETRY_AFTER)
            log.warning("%s %s: %s; retrying in %.1f s", self.provider, self.what, failure, delay)
            self._sleep(delay)
            attempt += 1

    def _exchange(self, payload: bytes, max_bytes: int) -> tuple[int, str | None, bytes]:
        """One request: the status, the Retry-After header and, for a 200 only, the body. Read as a stream, so the
        whole answer is bounded by the timeout (the client's bounds each read only: a request ends within one read's
        timeout of its deadline) and by `max_bytes`."""
        deadline = time.monotonic() + self.options.timeout
        with self._client.stream("POST", self._url, content=payload) as response:
            if response.status_code != 200:
                return response.status_code, response.headers.get("retry-after"), b""  # its body is never read
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise self.too_large(max_bytes)
            content = bytearray()
            for piece in response.iter_bytes():
                content += piece
                if len(content) > max_bytes:
                    raise self.too_large(max_bytes)
                if time.monotonic() > deadline:
                    raise _Overdue
            return 200, None, bytes(content)

    def malformed(self) -> EmbeddingError:
        return EmbeddingError(f"{self.provider} returned a malformed {self.what} response (HTTP 200)")

    def too_large(self, max_bytes: int) -> EmbeddingError:
        return EmbeddingError(f"{self.provider} {self.what} failed: the answer is larger than {max_bytes} bytes")


class _Overdue(Exception):
    """The answer was still arriving when the request's timeout ran out."""


def answer_cap(rows: int, numbers: int) -> int:
    """The most bytes a 200 answer of `rows` rows of `numbers` numbers each may take: scaled to the batch, so a
    batch of 128 vectors of 1024 dimensions may bring 6.1 MiB, and one query's vector 112.5 KiB."""
    return ANSWER_SLACK + rows * (ROW_BYTES + numbers * NUMBER_BYTES)


class HttpEmbedder(ProviderApi):
    """Shared machinery of the JSON embedding APIs; subclasses say how to shape a request."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        dimensions: int,
        base_url: str,
        tokenizer: Tokenizer,
        max_tokens: int,
        options: HttpOptions | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(api_key=api_key, base_url=base_url, options=options, sleep=sleep)
        self.model = model
        self.dimensions = dimensions
        self.max_tokens = max_tokens
        self.tokenizer = tokenizer

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(model={self.model!r}, url={self._url!r})"

    def body(self, texts: Sequence[str], kind: InputKind) -> dict[str, Any]:
        raise NotImplementedError

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [
            self._embed_batch(texts[i : i + self.options.batch_size], kind)
            for i in range(0, len(texts), self.options.batch_size)
        ]
        return normalise(np.concatenate(parts))

    def probe(self) -> int:
        """Embed one word to check the key, the URL and the model; returns the dimensions the API answered with."""
        return int(self._embed_batch(["ping"], "query", check_dimensions=False).shape[1])

    def _embed_batch(self, texts: Sequence[str], kind: InputKind, *, check_dimensions: bool = True) -> Vectors:
        # A query waits for no retry: a search answers by keyword at once, and the breaker above us retries later.
        retries = 0 if kind == "query" else self.options.max_retries
        numbers = self.dimensions if check_dimensions else max(self.dimensions, PROBE_DIMENSIONS)
        document = self.post(self.body(texts, kind), retries, answer_cap(len(texts), numbers))
        return self._parse(document, len(texts), check_dimensions)

    def _parse(self, document: Any, count: int, check_dimensions: bool) -> Vectors:
        try:
            rows = document["data"]
            if not isinstance(rows, list) or len(rows) != count:
                raise ValueError(f"expected {count} embeddings, got {len(rows) if isinstance(rows, list) else 'none'}")
            ordered: list[list[float] | None] = [None] * count
            for row in rows:
                index = row["index"]
                if not isinstance(index, int) or not 0 <= index < count or ordered[index] is not None:
                    raise ValueError("embedding indexes are not a permutation of the inputs")
                ordered[index] = row["embedding"]
            vectors = np.asarray(ordered, dtype=np.float32)
        except MALFORMED:
            raise self.malformed() from None
        if vectors.ndim != 2 or (check_dimensions and vectors.shape[1] != self.dimensions):
            got = vectors.shape[1] if vectors.ndim == 2 else "ragged"
            raise EmbeddingError(f"{self.provider} returned vectors of {got} dimensions, expected {self.dimensions}")
        if (why := unusable(vectors)) is not None:
            raise EmbeddingError(f"{self.provider} returned a malformed {self.what} response (HTTP 200): {why}")
        return vectors


# What a status means, in our words: a provider's error body may quote the key (upper-cased, URL-encoded,
# base64, split over fields), so none of it ever reaches a caller or a log. The status code is enough to act on.
_MEANINGS = {
    400: "the provider refused the request",
    401: "the API key was refused",
    403: "the API key may not use this model",
    404: "unknown model or endpoint",
    408: "the provider timed out",
    413: "the batch is too large for the provider",
    429: "rate-limited by the provider",
}


def provider_failure(status: int) -> str:
    """The one message a provider's error answer becomes: its status code and a fixed meaning."""
    meaning = _MEANINGS.get(status) or ("the provider failed" if status >= 500 else "unexpected answer")
    return f"HTTP {status} ({meaning})"


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # HTTP-date form: fall back to our own backoff
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class VoyageEmbedder(HttpEmbedder):
    """Voyage AI: `input_type` distinguishes documents from queries, which Voyage embeds differently."""

    provider = "voyage"

    def body(self, texts: Sequence[str], kind: InputKind) -> dict[str, Any]:
        return {"input": list(texts), "model": self.model, "input_type": kind, "truncation": True}


class OpenAIEmbedder(HttpEmbedder):
    """OpenAI (or any server speaking its embeddings API)."""

    provider = "openai"

    def body(self, texts: Sequence[str], kind: InputKind) -> dict[str, Any]:
        return {"input": list(texts), "model": self.model, "encoding_format": "float"}
