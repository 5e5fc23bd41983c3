"""Benchmark: session transcripts, from Claude Code's JSONL to searchable chunks (all-MiniLM-L6-v2 on this machine).

200 synthetic sessions of 500 messages each (250 user prompts of one to three sentences, 250 assistant answers of
two to six sentences, one tool call in three), written in Claude Code's format by `tests.transcript_fixtures`.

1. Converting, on the laptop: read and parse (`read_transcript`), render to markdown, redact, split into parts;
   all 200 sessions.
2. Indexing, on the server: the rendered parts as `sessions/<caller>/…md` files indexed by the engine with the real
   model; the time, the chunks, and the share of that time spent inside the embedding model (measured around every
   `embed` call). Embedding all 200 sessions takes hours on 2 cores, so by default a sample of them is indexed
   (`--index N`, default 12; `--index 200` for all) and the whole is extrapolated per chunk.

    .venv/bin/python bench/bench_transcripts.py [--quick] [--index N]
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

from common import CACHE, report, save_json, table

from client_proxy.transcripts.files import read_transcript
from client_proxy.transcripts.render import render_markdown, split_parts
from redaction import redact
from server.index.embeddings.base import InputKind, Vectors
from server.index.embeddings.local import LocalEmbedder
from server.index.engine import MemoryIndex
from tests.transcript_fixtures import assistant_lines, at, tool_use, user_line, write_session

QUICK = "--quick" in sys.argv
SESSIONS = 20 if QUICK else 200
MESSAGES = 500
SAMPLE = int(sys.argv[sys.argv.index("--index") + 1]) if "--index" in sys.argv else (3 if QUICK else 12)
WORDS = (
    "cache invalidation retry backoff schema migration index query latency deploy rollback feature flag "
    "queue consumer lag token refresh websocket handshake parser fixture snapshot benchmark profile memory "
    "leak thread pool connection timeout config loader dependency upgrade lockfile container health check"
).split()


class TimedEmbedder:
    """The real embedder, with the time spent inside `embed` added up."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.provider, self.model, self.dimensions = inner.provider, inner.model, inner.dimensions
        self.max_tokens, self.tokenizer = inner.max_tokens, inner.tokenizer

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        started = time.perf_counter()
        try:
            return self.inner.embed(texts, kind=kind)
        finally:
            self.seconds += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."


def session_lines(number: int, cwd: str, rng: random.Random) -> list[Any]:
    session = f"{number:08x}-0000-4000-8000-{number:012x}"
    lines: list[Any] = []
    for turn in range(MESSAGES // 2):
        prompt = " ".join(sentence(rng) for _ in range(rng.randint(1, 3)))
        lines.append(user_line(prompt, cwd=cwd, ts=at(turn), session=session))
        tools = [tool_use("Read", file_path=f"{cwd}/src/module_{turn % 40}.py")] if turn % 3 == 0 else []
        answer = " ".join(sentence(rng) for _ in range(rng.randint(2, 6)))
        lines += assistant_lines(answer, tools, cwd=cwd, ts=at(turn + 0.5), session=session)
    return lines


def main() -> None:
    work = CACHE / "transcripts"
    shutil.rmtree(work, ignore_errors=True)
    claude, files = work / "claude", work / "files" / "sessions" / "alice"
    files.mkdir(parents=True)
    rng = random.Random(7)
    paths = [write_session(claude, f"s{n:04}", session_lines(n, "/home/me/app", rng)) for n in range(SESSIONS)]
    source_bytes = sum(path.stat().st_size for path in paths)

    started = time.perf_counter()
    rendered: list[list[str]] = []
    redacted = 0
    for path in paths:
        transcript = read_transcript(path)
        redaction = redact(render_markdown(transcript, laptop="alice-laptop"))
        redacted += redaction.total
        rendered.append(split_parts(redaction.text))
    convert = time.perf_counter() - started
    markdown_bytes = sum(len(part.encode("utf-8")) for parts in rendered for part in parts)

    for number, parts in enumerate(rendered[:SAMPLE]):
        for part_number, part in enumerate(parts, start=1):
            suffix = "" if part_number == 1 else f".{part_number}"
            (files / f"2026-11-23-s{number:04}{suffix}.md").write_text(part, "utf-8")
    embedder = TimedEmbedder(LocalEmbedder())
    embedder.inner.warm_up()
    index = MemoryIndex.open(work / "data", "bench", embedder, create=True)  # type: ignore[arg-type]
    started = time.perf_counter()
    result = index.index(work / "files")
    indexing = time.perf_counter() - started
    chunks = result.chunks_embedded
    index.close()

    per_session = indexing / SAMPLE
    rows = [
        ["convert (read, render, redact, split)", SESSIONS, convert, SESSIONS / convert, "-"],
        [f"index (sample of {SAMPLE})", SAMPLE, indexing, SAMPLE / indexing, f"{embedder.seconds / indexing:.0%}"],
        ["index, extrapolated to all", SESSIONS, per_session * SESSIONS, 1 / per_session, "-"],
    ]
    body = (
        f"{SESSIONS} sessions of {MESSAGES} messages ({source_bytes / 1e6:.1f} MB of JSONL, "
        f"{markdown_bytes / 1e6:.1f} MB of markdown, {redacted} secrets redacted in this synthetic text).\n\n"
    )
    body += table(["step", "sessions", "seconds", "sessions/s", "in embedding"], rows)
    body += (
        f"\n\nThe sample made {chunks} chunks ({chunks / SAMPLE:.0f} per session, "
        f"{chunks / indexing:.1f} chunks/s); embedding took {embedder.seconds:.1f} s of {indexing:.1f} s "
        f"({embedder.seconds / indexing:.0%}). Converting is {convert / SESSIONS * 1000:.0f} ms per session; "
        f"indexing {per_session:.1f} s per session.\n"
    )
    report("transcripts", "Session transcripts: converting and indexing", body)
    save_json(
        "transcripts",
        {
            "sessions": SESSIONS,
            "messages": MESSAGES,
            "convert_s": convert,
            "sample": SAMPLE,
            "index_s": indexing,
            "embed_s": embedder.seconds,
            "chunks": chunks,
        },
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
