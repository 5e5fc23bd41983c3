"""The one redaction rule for text entering the server, whichever way it comes: `memory_write`, a sync push, a
session transcript. No secret the rules of `redaction` recognise reaches the mirror, the index, search results
or another laptop.

What happens to the writer's original differs by way in, so that nothing is silently destroyed:

- `memory_write` and transcripts are redacted and stored. The original of a `memory_write` is the agent's own
  argument (it stays in its context; the tool result counts what was replaced, per kind); a transcript's original
  is Claude Code's session file, which stays on the laptop (the proxy redacts before sending; the server redacts
  again, so an old or modified proxy cannot slip one in).
- A synced file is the user's own file: redacting it on the server would come back to the laptop as an edit and
  overwrite the original. So the push is refused instead, with a message naming the kinds and lines (never the
  secret): the file stays as it is, only on that laptop, the proxy logs the refusal and `memory-proxy status`
  lists it, and the file is offered again once the user changes it.

A file's *name* is text entering the server too (listed, logged, synced to every laptop), but it cannot be
redacted: the file would land somewhere other than where it was asked for. So a path holding a secret is refused on
every way in that names one (`memory_write`, a sync push, `memory_restore`), with the path shown with the secret
replaced by its marker. So are `memory_write`'s `tags` and `category`: they are stored in the file (its front
matter or an entry's heading) and returned with search hits, and a marker is no tag.

Turning `redact_writes` off (MEMORY_REDACT_WRITES=0) turns the rule off for every way in at once.
"""

from __future__ import annotations

from redaction import Redaction, redact
from server.errors import SecretsRefusedError
from server.index.labels import normalise_category, normalise_tag

MAX_LINES_NAMED = 5
MAX_LABEL_SHOWN = 60  # characters of a refused label shown (redacted) in the message


def redacted(text: str, counts: dict[str, int] | None = None) -> str:
    """`text` with every recognised secret replaced by its marker; adds the replacements per kind to `counts`."""
    result = redact(text)
    if counts is not None:
        for kind, count in result.counts.items():
            counts[kind] = counts.get(kind, 0) + count
    return result.text


def refuse_secrets(path: str, text: str) -> None:
    """Raise `SecretsRefusedError` when a synced file's `path` or its content `text` holds a secret the rules
    recognise."""
    refuse_secret_path(path, "It stays only on this laptop: rename the file to a name without the secret")
    found = redact(text)
    if not found.total:
        return
    raise SecretsRefusedError(f"{path} was not synced: {describe(found, text)}")


def refuse_secret_path(path: str, advice: str) -> None:
    """Raise `SecretsRefusedError` when the file name `path` holds a secret; the message shows the path with the
    secret replaced by its marker, then `advice` (what the writer can do)."""
    found = redact(path)
    if not found.total:
        return
    raise SecretsRefusedError(
        f"{found.text} is refused: its name holds {found.total} secret(s) ({_kinds(found)}), and a name cannot"
        f" be redacted. {advice}"
    )


def refuse_secret_labels(tags: object, category: object, advice: str) -> None:
    """Raise `SecretsRefusedError` when a tag or the category of a write holds a secret, as sent or as it would be
    stored (normalised: lower case); the message shows it with the secret replaced by its marker, then `advice`.
    Arguments of the wrong type are left to `server.index.labels.labels_argument`."""
    named = [("tags", tag) for tag in tags if isinstance(tag, str)] if isinstance(tags, list | tuple) else []
    if isinstance(category, str):
        named.append(("category", category))
    for argument, raw in named:
        stored = normalise_tag(raw) if argument == "tags" else normalise_category(raw)
        for form in (raw, stored or ""):
            found = redact(form)
            if found.total:
                raise SecretsRefusedError(
                    f"{argument}: {found.text[:MAX_LABEL_SHOWN]!r} is refused: it holds {found.total} secret(s)"
                    f" ({_kinds(found)}), and a label cannot be redacted (a marker is no tag). {advice}"
                )


def describe(found: Redaction, original: str) -> str:
    """Which kinds of secret and on which lines, for the user to find them; never any of the secret."""
    kinds = _kinds(found)
    lines = _changed_lines(original, found.text)
    where = ", ".join(str(n) for n in lines[:MAX_LINES_NAMED]) + (", …" if len(lines) > MAX_LINES_NAMED else "")
    return (
        f"it holds {found.total} secret(s) ({kinds}) on line(s) {where}. It stays only on this laptop: remove the "
        "secret or refer to where it is kept (an environment variable, a vault), and save the file again"
    )


def _kinds(found: Redaction) -> str:
    return ", ".join(f"{count} {kind}" for kind, count in sorted(found.counts.items()))


def _changed_lines(original: str, redacted_text: str) -> list[int]:
    """1-based numbers of the lines redaction changed (markers never add or remove a line break)."""
    before, after = original.splitlines(), redacted_text.splitlines()
    return [n for n, (a, b) in enumerate(zip(before, after, strict=False), start=1) if a != b]
