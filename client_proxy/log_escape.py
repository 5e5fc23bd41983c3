"""Log lines that nothing from outside can forge: control characters in a message are escaped.

A server (or a file name on disk) may put a newline and a fake timestamp into a path the proxy logs; written as
is, it would start a line of its own that looks like ours. Every message is escaped (`\\n`, `\\x1b`, …); a
traceback keeps its line breaks but each of its lines is indented, so none can pass for a record."""

from __future__ import annotations

import logging
import unicodedata


def escape(text: str) -> str:
    """`text` with control, format and separator characters written as escapes; everything else as is."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch == " " or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp", "Cs") else _escaped(ch)
        for ch in text
    )


def for_terminal(text: str) -> str:
    """`text` safe to print on a terminal: escaped as `escape` does, but for line breaks (a Windows line ending
    counts as one) and tabs, so a server's words cannot set the clipboard (OSC 52) or overwrite a line."""
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join("\t".join(escape(part) for part in line.split("\t")) for line in lines)


def _escaped(ch: str) -> str:
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or ch.encode("unicode_escape", "backslashreplace").decode()


class EscapingFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        lines = super().formatException(ei).splitlines()
        return "\n".join("  " + escape(line) for line in lines)

    def formatStack(self, stack_info: str) -> str:
        return "\n".join("  " + escape(line) for line in stack_info.splitlines())
