"""Finding 3: a file the server cannot read (no permission, over the size cap, not UTF-8) is never treated as
deleted: every laptop keeps its copy, and memory_status lists the file. The real server and a real `memory-proxy`
process; the permission case in process (the tests run as root, whom no file mode stops)."""

from __future__ import annotations

import errno
import os

import pytest

from server.memory.service import CallerContext
from server.mirror.mirror import Mirror
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer, eventually

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("damage", ["not utf-8", "over the size cap"])
async def test_a_file_the_server_cannot_send_is_kept_on_every_laptop_and_listed_in_status(tmp_path, damage):
    server = ProductServer(tmp_path / "server", HashingEmbedder(), {"bob": {"team": "rw"}})
    bob = Laptop(tmp_path / "bob", server, "bob", "team")
    bob.write("memory/notes.md", "the deploy runbook\n")
    server.start()
    try:
        with bob.bare():
            await eventually(lambda: server.text("team", "memory/notes.md") is not None, "the first push")
            files = server.data_dir / "indexes" / "team" / "files"
            broken = b"\xff\xfe not text\n" if damage == "not utf-8" else b"x" * (2 * 1024 * 1024 + 1)
            # in one step, as a rename: a file written in place can be read empty halfway, which is a real edit
            staged = files / "memory" / ".notes.md.staged"
            staged.write_bytes(broken)
            os.replace(staged, files / "memory" / "notes.md")
            (files / "memory" / "pulled.md").write_text("pulled after the damage\n")  # the pull's marker
            await eventually(lambda: bob.read("memory/pulled.md") is not None, "the pull after the damage")
        assert bob.read("memory/notes.md") == "the deploy runbook\n"  # the old server deleted it here
        assert server.service is not None
        status = server.service.status(CallerContext("bob", "SHA256:b", {"team": "rw"}, "team", "rw"))
        assert list(status.unreadable) == ["memory/notes.md"]
    finally:
        server.stop()


def test_a_mirror_file_without_read_permission_keeps_its_state(tmp_path, monkeypatch):
    mirror = Mirror(tmp_path / "idx")
    mirror.write("memory/secret-plans.md", "kept\n", caller="alice")
    revision = mirror.revision()
    target = mirror.files_dir / "memory" / "secret-plans.md"
    os.utime(target, ns=(1, 1))  # changed on disk: the next listing looks at it again
    real_open = os.open

    def denied(path, flags, *args, **kwargs):
        if os.fspath(path) == "secret-plans.md":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    listed = [state.path for state in mirror.reconcile_all()]
    monkeypatch.undo()
    assert listed == ["memory/secret-plans.md"]  # the old mirror recorded a deletion here
    assert mirror.revision() == revision
    assert "memory/secret-plans.md" in mirror.unreadable
    mirror.close()
