"""A session with every piece of its text redacted whole, before rendering cuts any of it short.

Rendering shortens a title, a tool call's target and a long message; a secret cut by that (a token of fixed length
losing its last characters) no longer matches its rule, yet what is left of it may still give it away. So each
piece is redacted as the session file holds it, and only then shortened.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from client_proxy.transcripts.lines import ToolCall, Transcript
from redaction import redact


def redact_transcript(transcript: Transcript) -> tuple[Transcript, dict[str, int]]:
    """`transcript` with its id, title, folder, branch, message texts and tool calls redacted, and the counts per
    kind. (The id is shown, and stands in for a missing title; the server's file name is made of it apart.)"""
    counts: Counter[str] = Counter()

    def clean(text: str) -> str:
        result = redact(text)
        counts.update(result.counts)
        return result.text

    def optional(text: str | None) -> str | None:
        return None if text is None else clean(text)

    messages = tuple(
        replace(
            message,
            text=clean(message.text),
            tools=tuple(ToolCall(clean(call.name), clean(call.target), call.failed) for call in message.tools),
        )
        for message in transcript.messages
    )
    redacted = replace(
        transcript,
        session_id=clean(transcript.session_id),
        title=optional(transcript.title),
        cwd=optional(transcript.cwd),
        git_branch=optional(transcript.git_branch),
        messages=messages,
    )
    return redacted, dict(counts)
