"""A local HTTP server speaking the Voyage and OpenAI embeddings wire format and Voyage's rerank, for tests (the
real APIs are unreachable here). Vectors are a hashed bag of words, so similar texts really are close; a rerank
scores the query's words a document holds; failures (slow, flooding and malformed answers too) are scripted."""

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
from typing import Any, NamedTuple

WORD = re.compile(r"\w+")
FLOOD_PIECE = b" " * 65536
OVERFLOWED = re.compile(rb'(?<="embedding": \[)[-0-9.e+]+|(?<="relevance_score": )[-0-9.e+]+')


def bag_of_words(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for word in WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "little") % dimensions] += 1.0 if digest[4] & 1 else -1.0
    return vector


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes
    delay: float = 0.0  # seconds before the answer
    drip: float = 0.0  # seconds between its body's bytes: slow, though no single read waits long
    flood: int = 0  # bytes sent instead of the body, without a Content-Length


@dataclass
class Failure:
    """Answer the next `times` requests with this status (or with `body`/a delay instead of a normal answer)."""

    status: int = 500
    times: int = 1
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drip: float = 0.0
    flood: int = 0


@dataclass
class FakeProviderAPI:
    api_key: str
    dimensions: int = 64
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    shuffle: bool = True  # answer in reverse index order, as the real APIs are allowed to
    # "count", "dimensions", "nan", "indexes", "json"; and hostile: "zero" (all-zero vectors), "deep" (JSON nested
    # past any parser's depth), "gzip" (said to be gzip, but not), "overflow" (a number of 400 digits)
    corrupt: str | None = None

    def fail(self, status: int = 500, times: int = 1, **kwargs: Any) -> None:
        self.failures.append(Failure(status=status, times=times, **kwargs))

    def answer(self, headers: dict[str, str], raw: bytes) -> Reply:
        if self.failures:
            failure = self.failures[0]
            failure.times -= 1
            if failure.times <= 0:
                self.failures.pop(0)
            body = failure.body or json.dumps({"error": {"message": f"scripted failure {failure.status}"}}).encode()
            return Reply(failure.status, failure.headers, body, failure.delay, failure.drip, failure.flood)
        if headers.get("authorization") != f"Bearer {self.api_key}":
            shown = headers.get("authorization", "").removeprefix("Bearer ")
            # Like the real APIs, echo the wrong key back: the client must not pass it on.
            message = f"Incorrect API key provided: {shown}. You can find your API key at https://example.invalid"
            return Reply(401, {}, json.dumps({"error": {"message": message}}).encode())
        request = json.loads(raw)
        self.requests.append(request)
        if self.corrupt == "deep":
            return Reply(200, {}, b"[" * 10_000 + b"]" * 10_000)
        if self.corrupt == "gzip":
            return Reply(200, {"content-encoding": "gzip"}, b"this is not gzip at all" * 10)
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
            return Reply(200, {}, b"{not json")
        elif self.corrupt == "zero":
            rows = [{**row, "embedding": [0.0] * self.dimensions} for row in rows]
        if self.shuffle:
            rows.reverse()
        body = {"object": "list", "data": rows, "model": request["model"], "usage": {"total_tokens": len(texts)}}
        return Reply(200, {}, self.overflowing(json.dumps(body, allow_nan=True).encode()))

    def overflowing(self, body: bytes) -> bytes:
        """In "overflow" mode, the body with its first vector's or score's first number of 400 digits: valid JSON,
        but no float holds it."""
        if self.corrupt != "overflow":
            return body
        return OVERFLOWED.sub(b"1" + b"0" * 400, body, count=1)

    def rerank_scores(self, query: str, documents: list[str]) -> list[float]:
        """Voyage's rerank, faked: the share of the query's words that a document holds."""
        wanted = set(WORD.findall(query.lower()))
        return [len(wanted & set(WORD.findall(d.lower()))) / max(1, len(wanted)) for d in documents]

    def rerank(self, request: dict[str, Any]) -> Reply:
        scores = self.rerank_scores(request["query"], request["documents"])
        rows = sorted(
            ({"index": i, "relevance_score": score} for i, score in enumerate(scores)),
            key=lambda row: -float(row["relevance_score"]),
        )  # best first, as Voyage answers
        if self.corrupt == "indexes":
            rows = [{**row, "index": 0} for row in rows]
        body = {"object": "list", "data": rows, "model": request["model"], "usage": {"total_tokens": len(rows)}}
        return Reply(200, {}, self.overflowing(json.dumps(body).encode()))


@contextmanager
def serve(api: FakeProviderAPI) -> Iterator[FakeProviderAPI]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            if self.path not in ("/v1/embeddings", "/v1/rerank"):
                reply = Reply(404, {}, b'{"detail": "Not Found"}')
            else:
                lowered = {k.lower(): v for k, v in self.headers.items()}
                reply = api.answer(lowered, raw)
            if reply.delay:
                time.sleep(reply.delay)
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                if not reply.flood:  # a flood's end is the connection's (HTTP/1.0)
                    self.send_header("content-length", str(len(reply.body)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if reply.flood:
                    for _ in range(0, reply.flood, len(FLOOD_PIECE)):
                        self.wfile.write(FLOOD_PIECE)
                elif reply.drip:
                    for byte in reply.body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(reply.drip)
                else:
                    self.wfile.write(reply.body)
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
