"""The error tree and its one table: every error class is mapped, and no message a caller sees holds a secret or
a path on the server's disk."""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp.types import INVALID_PARAMS

import server
import syncproto
from server.error_table import ERROR_TABLE, KNOWN_ERRORS, answer_for
from server.errors import MemoryServerError
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from syncproto.errors import ProtocolError
from tests.fakes.embedder import HashingEmbedder

SECRET = "sk-proj-canary0123456789abcdefABCDEF0123456789"


def _every_module(package: object) -> None:
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):  # type: ignore[attr-defined]
        importlib.import_module(module.name)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found | {deeper for sub in found for deeper in _subclasses(sub)}


def _error_classes() -> set[type]:
    _every_module(server)
    _every_module(syncproto)
    classes = {MemoryServerError, ProtocolError} | _subclasses(MemoryServerError) | _subclasses(ProtocolError)
    return {cls for cls in classes if cls.__module__.split(".")[0] in ("server", "syncproto")}


def test_every_error_class_has_a_row_of_its_own_in_the_one_table():
    unmapped = sorted(cls.__qualname__ for cls in _error_classes() if cls not in ERROR_TABLE)
    assert unmapped == []


def test_every_row_answers_a_client_error_or_a_generic_server_error():
    for cls, answer in ERROR_TABLE.items():
        assert issubclass(cls, KNOWN_ERRORS)
        assert answer.mcp_code == INVALID_PARAMS
        assert (400 <= answer.status < 500 and answer.shown) or (answer.status >= 500 and answer.code)


def test_an_error_nobody_raised_on_purpose_has_no_answer():
    assert answer_for(RuntimeError("library detail")) is None
    assert answer_for(OSError(2, "No such file")) is None


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path / "data", HashingEmbedder(), rescan_interval=0.0)
    yield running
    running.close()


ALICE = CallerContext("alice", "SHA256:alice", {"proj": "rw"}, "proj", "rw")
READER = CallerContext("reader", "SHA256:reader", {"proj": "r"}, "proj", "r")


def _refusals(service: MemoryService, tmp_path: Path) -> Iterator[tuple[str, Callable[[], object]]]:
    service.write(ALICE, f"token {SECRET}\n", path="memory/keys.md", mode="replace", expected_hash="absent")
    yield "bad path", lambda: service.get(ALICE, f"../{SECRET}/x.md")
    yield "a reader writes", lambda: service.write(READER, f"note {SECRET}", path="memory/a.md")
    yield (
        "stale hash",
        lambda: service.write(ALICE, f"new {SECRET}", path="memory/keys.md", mode="replace", expected_hash="0" * 64),
    )
    yield "bad scope", lambda: service.search(ALICE, SECRET, scope="everything")  # type: ignore[arg-type]
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, service.data_dir / "indexes" / "proj" / "files" / "memory" / "linked")
    yield "a planted link", lambda: service.get(ALICE, "memory/linked/x.md")
    service.close()
    yield "closed", lambda: service.status(ALICE)


def test_no_refusal_a_caller_sees_holds_a_secret_or_a_server_path(service: MemoryService, tmp_path: Path):
    seen = []
    for what, call in _refusals(service, tmp_path):
        with pytest.raises(KNOWN_ERRORS) as caught:
            call()
        message = str(caught.value)
        assert answer_for(caught.value) is not None, what
        assert SECRET not in message and str(tmp_path) not in message and "/data/" not in message, (what, message)
        seen.append(type(caught.value).__name__)
    assert {"InvalidArgumentError", "PermissionDeniedError", "ConflictError", "UnsafePathError"} <= set(seen)
    assert "ServiceClosedError" in seen
