"""The memory tools' structured results as text for a terminal (pure: data in, text out).

What a person scans: one block per search hit (score, citation, who and when, the snippet indented), a file with
line numbers, a write's place, a listing as aligned columns. `--json` prints the results as they came instead.

Every string in a result passes through `_printable` first: control characters are escaped as in the log
(`client_proxy.log_escape`), line breaks and tabs aside, so a memory holding terminal escapes (OSC 52 setting the
clipboard, a screen clear, a carriage return overwriting the line) shows them as text instead of running them.
`as_json` writes the same characters as JSON's `\\uXXXX` escapes: the values parse back unchanged.

A result of the wrong shape (a server's bug, or a hostile one) raises KeyError, TypeError, ValueError or the like
here; `client_proxy.remote.commands` turns those into one error.
"""

from __future__ import annotations

import json
from typing import Any

from client_proxy.log_escape import escape, for_terminal

SNIPPET_LINES = 6


def search(result: dict[str, Any]) -> str:
    result = _printable(result)
    hits = result.get("hits") or []
    lines = [f"{len(hits)} hit{'' if len(hits) == 1 else 's'} ({result.get('search_mode')} search)"]
    if result.get("notice"):
        lines.append(f"note: {result['notice']}")
    for hit in hits:
        who = _who_when(hit)
        lines.append("")
        lines.append(f"{hit['score']:.3f}  {hit['citation']}  {hit.get('heading') or ''}".rstrip())
        if who:
            lines.append(f"       {who}  ({hit.get('matched_by')})")
        snippet = str(hit.get("snippet") or "").splitlines()[:SNIPPET_LINES]
        lines.extend(f"       | {line}" for line in snippet)
    return "\n".join(lines) + "\n"


def get(result: dict[str, Any]) -> str:
    result = _printable(result)
    if not result.get("exists"):
        return f"{result['path']}: no such file\n"
    header = f"{result['path']}  lines {result['start_line']}-{result['end_line']} of {result['total_lines']}"
    who = _who_when(result)
    lines = [header + (f"  ({who})" if who else "")]
    width = len(str(result["end_line"]))
    text = str(result.get("content") or "")
    for number, line in enumerate(text.split("\n") if text else [], start=result["start_line"]):
        lines.append(f"{number:>{width}}  {line}".rstrip())
    inside, following = result.get("next_start_char"), result.get("next_start_line")
    if result.get("truncated") and inside:
        end = result["end_line"]
        lines.append(f"... line {end} continues at its character {inside} (--start {end} --start-char {inside})")
    elif result.get("truncated") and following:
        lines.append(f"... continues at line {following} (--start {following})")
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any]) -> str:
    result = _printable(result)
    verb = "replaced" if result["mode"] == "replace" else "appended to"
    place = f"{result['path']}#L{result['start_line']}-L{result['end_line']}"
    text = f"{verb} {place} ({result['lines']} lines, hash {result['hash'][:12]})"
    if result.get("replayed"):
        text += "; already written by an earlier call with this idempotency key"
    redacted = result.get("redacted") or {}
    if redacted:
        text += "; secrets masked: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(redacted.items()))
    return text + "\n"


def listing(files: list[dict[str, Any]], total: int) -> str:
    files = _printable(files)
    if not files:
        return "no files\n"
    width = max(len(entry["path"]) for entry in files)
    lines = [
        f"{entry['path']:<{width}}  {entry['lines']:>6} lines  {entry['size']:>8} B  {_who_when(entry)}".rstrip()
        for entry in files
    ]
    shown = f"{len(files)} of {total}" if total > len(files) else str(total)
    lines.append(f"{shown} file{'' if total == 1 else 's'}")
    return "\n".join(lines) + "\n"


def history(result: dict[str, Any]) -> str:
    result = _printable(result)
    versions = result.get("versions") or []
    if not versions:
        return "no deleted files\n" if result.get("deleted") else "no versions\n"
    width = max(len(str(entry["version"])) for entry in versions)
    lines = [
        f"{entry['version']:>{width}}  {entry['change']:<13} {entry['path']}  {entry['size']} B  {_who_when(entry)}"
        for entry in versions
    ]
    if result.get("next_before"):
        lines.append(f"older: --before {result['next_before']}")
    return "\n".join(lines) + "\n"


def restore(result: dict[str, Any]) -> str:
    result = _printable(result)
    if not result.get("changed"):
        return f"{result['path']} already is version {result['restored_version']}; nothing changed\n"
    now = "deleted" if result.get("hash") is None else f"hash {result['hash'][:12]}"
    return (
        f"restored {result['path']} to version {result['restored_version']} as new version {result['version']} "
        f"({now}); undo with: memory-proxy restore {result['path']} <the version before>\n"
    )


def as_json(result: Any) -> str:
    """`result` as indented JSON, other non-ASCII as is, but every character `log_escape.escape` would escape
    (C0 and C1 controls, DEL, format characters such as bidi overrides, line separators, lone surrogates) as
    `\\uXXXX`: JSON itself escapes only U+0000-U+001F, and CSI (U+009B) drives a terminal as ESC [ does."""
    text = json.dumps(result, indent=2, ensure_ascii=False)
    return "\n".join(line if line.isprintable() else _json_escaped(line) for line in text.split("\n")) + "\n"


def _json_escaped(line: str) -> str:
    # A raw character left by json.dumps is inside a string (the structure is ASCII spaces and line breaks).
    return "".join(ch if escape(ch) == ch else _utf16_escape(ch) for ch in line)


def _utf16_escape(ch: str) -> str:
    units = ch.encode("utf-16-be", "surrogatepass")  # past U+FFFF: a surrogate pair, as JSON spells it
    return "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))


def _who_when(item: dict[str, Any]) -> str:
    at = str(item.get("updated_at") or "").replace("T", " ").replace("Z", " UTC")
    by = item.get("updated_by")
    return " ".join(part for part in (f"by {by}" if by else "", at) if part)


def _printable(value: Any) -> Any:
    """`value` with each string in it (keys too) safe to print: control characters escaped but for line breaks
    (a Windows line ending counts as one) and tabs."""
    if isinstance(value, str):
        return for_terminal(value)
    if isinstance(value, dict):
        return {_printable(key): _printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable(item) for item in value]
    return value
