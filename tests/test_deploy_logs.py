"""The server's log: text or one JSON object per line on stderr, with the same facts either way."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from server.observe import logs


@contextmanager
def fresh_process_logging() -> Iterator[None]:
    """The root logger without pytest's capture handlers, as a fresh process has it; restored afterwards.
    (Entered in the test body: pytest adds its handlers again when the test call starts.)"""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in logs.NOISY}
    root.handlers = []
    try:
        yield
    finally:
        root.handlers, root.level = handlers, level
        for name, old in noisy.items():
            logging.getLogger(name).setLevel(old)


def test_a_json_line_has_time_level_logger_message_and_the_extra_fields():
    record = logging.LogRecord("channel.server", logging.WARNING, __file__, 1, "refused %s", ("bad-message",), None)
    record.caller, record.bytes = "alice", 106

    entry = json.loads(logs.JsonFormatter().format(record))

    assert entry == {
        "time": entry["time"],
        "level": "warning",
        "logger": "channel.server",
        "message": "refused bad-message",
        "caller": "alice",
        "bytes": 106,
    }
    assert dt.datetime.fromisoformat(entry["time"]).utcoffset() == dt.timedelta(0)


def test_an_exception_is_kept_in_one_line_and_odd_values_are_written_as_text():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        record = logging.LogRecord("server", logging.ERROR, __file__, 1, "failed", (), (type(exc), exc, None))
    record.path = object()
    line = logs.JsonFormatter().format(record)
    entry = json.loads(line)
    assert "\n" not in line and entry["exception"].startswith("ValueError: boom")
    assert entry["path"].startswith("<object object")


def test_configure_writes_json_lines_at_the_level_and_holds_chatty_libraries_back():
    stream = io.StringIO()
    with fresh_process_logging():
        logs.configure("debug", "json", stream)
        logging.getLogger("server.test").debug("indexed %d files", 3)
        logging.getLogger("sse_starlette.sse").debug("chunk: b'data: memory text'")  # it would carry tool results
        logging.getLogger("mcp.server.streamable_http_manager").info("Created new transport with session ID: 0123")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["level"], line["logger"], line["message"]) for line in lines] == [
        ("debug", "server.test", "indexed 3 files")
    ]


def test_configure_writes_text_lines_by_default():
    stream = io.StringIO()
    with fresh_process_logging():
        logs.configure("info", "text", stream)
        logging.getLogger("server.test").info("listening")
        logging.getLogger("server.test").debug("not shown")
    assert stream.getvalue() == "INFO server.test: listening\n"
