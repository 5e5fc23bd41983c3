"""The changed parts of one session in requests `POST /sync/sessions` takes, pure.

The server reads at most `MAX_PUSH_BYTES` of body and `MAX_PARTS_PER_UPLOAD` parts a request. A part is at most
`render.PART_BYTES` of UTF-8, but JSON escapes (`\\n`, `\\"`, `\\\\`) can make it up to twice that on the wire, so a
request is closed on the size of its body encoded exactly as `SyncApi.upload_session` encodes it, not on the parts'
own sizes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from syncproto.wire import MAX_PARTS_PER_UPLOAD, MAX_PUSH_BYTES

Part = tuple[int, str]  # (number from 1, markdown)
_ITEM_SEPARATOR = len(", ")  # json.dumps's between two list items


def upload_batches(session: str, day: str, count: int, changed: Sequence[Part]) -> list[list[Part]]:
    """`changed` in order, in as few requests as the server's caps allow; a single empty request when nothing
    changed (the count alone tells the server to drop parts past it). A part too large for any request goes alone,
    for the server to refuse."""
    envelope = _encoded_bytes({"session": session, "day": day, "count": count, "parts": []})
    batches: list[list[Part]] = [[]]
    size = envelope
    for number, content in changed:
        item = _encoded_bytes({"number": number, "content": content})
        batch = batches[-1]
        if batch and (len(batch) == MAX_PARTS_PER_UPLOAD or size + _ITEM_SEPARATOR + item > MAX_PUSH_BYTES):
            batch = []
            batches.append(batch)
            size = envelope
        size += item + (_ITEM_SEPARATOR if batch else 0)
        batch.append((number, content))
    return batches


def _encoded_bytes(value: object) -> int:
    """The bytes `value` takes in a body as `SyncApi.upload_session` writes it (`ensure_ascii=False`, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
