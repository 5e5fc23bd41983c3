"""A local HTTP server speaking the Voyage and OpenAI embeddings wire format and Voyage's rerank, for tests (the
real APIs are unreachable here). Vectors are a hashed bag of words, so similar texts really are close; a rerank
scores the query's words a document holds; failures are scripted."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORD = re.compile(r"\w+")


def bag_of_words(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for word in WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dimensions] += 1.0 if digest[4] & 1 else -1.0
    return vector


@dataclass
class Failure:
    """Answer the next `times` requests with this status (or with `body`/a delay instead of a normal answer)."""

    status: int = 500
    times: int = 1
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class FakeProviderAPI:
    api_key: str
    dimensions: int = 64
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    shuffle: bool = True  # answer in reverse index order, as the real APIs are allowed to
    corrupt: str | None = None  # "count", "dimensions", "nan", "indexes", "json"

    def fail(self, status: int = 500, times: int = 1, **kwargs: Any) -> None:
        self.failures.append(Failure(status=status, times=times, **kwargs))

    def answer(self, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes, float]:
        if self.failures:
            failure = self.failures[0]
            failure.times -= 1
            if failure.times <= 0:
                self.failures.pop(0)
            body = failure.body or json.dumps({"error": {"message": f"scripted failure {failure.status}"}}).encode()
            return failure.status, failure.headers, body, failure.delay
        if headers.get("authorization") != f"Bearer {self.api_key}":
            shown = headers.get("authorization", "").removeprefix("Bearer ")
            # Like the real APIs, echo the wrong key back: the client must not pass it on.
            message = f"Incorrect API key provided: {shown}. You can find your API key at https://example.invalid"
            return 401, {}, json.dumps({"error": {"message": message}}).encode(), 0.0
        request = json.loads(raw)
        self.requests.append(request)
        if "query" in request:
            return self.rerank(request)
        texts = request["input"]
        rows = [
            {"object": "embedding", "index": i, "embedding": bag_of_words(text, self.dimensions)}
            for i, text in enumerate(texts)
        ]
        if self.corrupt == "count":
            rows = rows[:-1]
        elif self.corrupt == "dimensions":
            rows = [{**row, "embedding": row["embedding"][:-1]} for row in rows]
        elif self.corrupt == "nan":
            rows[0]["embedding"][0] = float("nan")
        elif self.corrupt == "indexes":
            rows = [{**row, "index": 0} for row in rows]
        elif self.corrupt == "json":
            return 200, {}, b"{not json", 0.0
        if self.shuffle:
            rows.reverse()
        body = {"object": "list", "data": rows, "model": request["model"], "usage": {"total_tokens": len(texts)}}
        return 200, {}, json.dumps(body, allow_nan=True).encode(), 0.0

    def rerank_scores(self, query: str, documents: list[str]) -> list[float]:
        """Voyage's rerank, faked: the share of the query's words that a document holds."""
        wanted = set(WORD.findall(query.lower()))
        return [len(wanted & set(WORD.findall(d.lower()))) / max(1, len(wanted)) for d in documents]

    def rerank(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes, float]:
        scores = self.rerank_scores(request["query"], request["documents"])
        rows = sorted(
            ({"index": i, "relevance_score": score} for i, score in enumerate(scores)),
            key=lambda row: -float(row["relevance_score"]),
        )  # best first, as Voyage answers
        if self.corrupt == "indexes":
            rows = [{**row, "index": 0} for row in rows]
        body = {"object": "list", "data": rows, "model": request["model"], "usage": {"total_tokens": len(rows)}}
        return 200, {}, json.dumps(body).encode(), 0.0


@contextmanager
def serve(api: FakeProviderAPI) -> Iterator[FakeProviderAPI]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            if self.path not in ("/v1/embeddings", "/v1/rerank"):
                status, headers, body, delay = 404, {}, b'{"detail": "Not Found"}', 0.0
            else:
                lowered = {k.lower(): v for k, v in self.headers.items()}
                status, headers, body, delay = api.answer(lowered, raw)
            if delay:
                time.sleep(delay)
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and went away, as intended

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
