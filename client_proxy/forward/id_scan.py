"""A request's id read from only the first bytes of its line: the forwarder answers a line too large to forward
under that id, so the client's call ends instead of waiting for an answer that names no id it sent.

It reads the top-level members of the JSON object as far as the bytes go, skipping nested values without decoding
them, and gives up (None) on anything it cannot be sure of: no string `method` among the members read (the id of a
response names a request of the server's, not one of the client's), an id that is not a string or an integer, an
id the bytes end inside, or bytes that do not begin a JSON object.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, Final

from client_proxy.forward.jsonrpc import RequestId

_SPACE: Final = " \t\n\r"
_SCALAR_END: Final = frozenset(",}] \t\n\r")
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


class _CutError(Exception):
    """The bytes ended before the object did: what was read so far is all there is."""


def request_id_in(head: bytes) -> RequestId | None:
    """The id of the request whose line begins with `head`, when the top-level members `head` holds show one."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head)  # a character cut at the end is left out
    except UnicodeDecodeError:
        return None
    members: dict[str, Any] = {}
    try:
        _read_members(text, members)
    except _CutError:
        pass
    except ValueError:  # not JSON
        return None
    request_id, method = members.get("id"), members.get("method")
    if not isinstance(method, str) or isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return request_id


def _read_members(text: str, members: dict[str, Any]) -> None:
    """Fill `members` with the top-level members of the object `text` begins (nested values as None)."""
    pos = _skip_space(text, _expect(text, _skip_space(text, 0), "{"))
    if _at(text, pos) == "}":
        return
    while True:
        if _at(text, pos) != '"':
            raise ValueError("a member name must be a string")
        end = _string_end(text, pos)
        name = json.loads(text[pos:end])
        pos = _skip_space(text, _expect(text, _skip_space(text, end), ":"))
        end = _value_end(text, pos)
        members[name] = None if text[pos] in "{[" else json.loads(text[pos:end])  # the last one counts, as in json
        pos = _skip_space(text, end)
        if _at(text, pos) == "}":
            return
        pos = _skip_space(text, _expect(text, pos, ","))


def _value_end(text: str, pos: int) -> int:
    """Where the value starting at `pos` ends; nested objects and arrays are skipped by their brackets."""
    first = _at(text, pos)
    if first == '"':
        return _string_end(text, pos)
    if first not in "{[":
        end = pos
        while end < len(text) and text[end] not in _SCALAR_END:
            end += 1
        if end == len(text):
            raise _CutError()  # the number or literal may go on
        if end == pos:
            raise ValueError("a value is missing")
        return end
    depth = 0
    while True:
        char = _at(text, pos)
        if char == '"':
            pos = _string_end(text, pos)
            continue
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1


def _string_end(text: str, pos: int) -> int:
    """Just past the closing quote of the string starting at `pos`."""
    match = _STRING.match(text, pos)
    if match is None:
        raise _CutError()  # any characters may stand in a string: only its end can be missing
    return match.end()


def _at(text: str, pos: int) -> str:
    if pos >= len(text):
        raise _CutError()
    return text[pos]


def _expect(text: str, pos: int, char: str) -> int:
    if _at(text, pos) != char:
        raise ValueError(f"expected {char!r}")
    return pos + 1


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos
