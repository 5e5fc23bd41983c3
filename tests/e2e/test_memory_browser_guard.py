"""Who may use the memory browser: a real `memory-proxy ui` and a real server, raw HTTP requests a browser, another
site's page or a DNS-rebinding attacker could send. Only this run's token opens it; its cookie then must come with
this server's own Host, from no other page."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_proxy.ui.guard import CONTENT_SECURITY_POLICY
from tests.ui_support import RunningUi, memory_ui, team

TEAM = "team"


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[RunningUi]:
    with team(tmp_path, {"alice": {TEAM: "rw"}}) as running, memory_ui(running.laptops["alice"]) as serving:
        yield serving


def request(ui: RunningUi, method: str, path: str, headers: dict[str, str], body: bytes | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers={"Host": f"127.0.0.1:{ui.port}", **headers})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def sign_in(ui: RunningUi) -> str:
    """The printed URL, as the browser opens it: the Cookie header it gets back."""
    status, headers, _ = request(ui, "GET", ui.url.removeprefix(ui.origin), {})
    assert status == 303 and headers["Location"] == "/"
    assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
    return headers["Set-Cookie"].split(";", 1)[0]


def test_the_printed_url_signs_in_and_every_answer_carries_a_strict_policy(ui):
    cookie = sign_in(ui)
    status, headers, body = request(ui, "GET", "/", {"Cookie": cookie})
    assert status == 200 and b'<script src="/app.js"' in body
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY and "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    status, _, body = request(ui, "GET", "/api/info", {"Cookie": cookie, "Sec-Fetch-Site": "same-origin"})
    assert status == 200 and json.loads(body)["index"] == TEAM


def test_requests_without_the_token_or_from_another_site_or_host_are_refused(ui):
    cookie = sign_in(ui)
    same = {"Cookie": cookie}
    refused = {
        "no cookie": ("GET", "/api/files", {}),
        "a wrong token": ("GET", "/?token=guessed", {}),
        "a wrong cookie": ("GET", "/api/files", {"Cookie": cookie.split("=")[0] + "=guessed"}),
        "a rebound host name": ("GET", "/api/files", {**same, "Host": f"attacker.example:{ui.port}"}),
        "another port": ("GET", "/api/files", {**same, "Host": f"127.0.0.1:{ui.port + 1}"}),
        "a foreign origin": ("GET", "/api/files", {**same, "Origin": "http://attacker.example"}),
        "a cross-site fetch": ("GET", "/api/files", {**same, "Sec-Fetch-Site": "cross-site"}),
        "a token from a foreign page": ("GET", ui.url.removeprefix(ui.origin), {"Origin": "http://attacker.example"}),
        "a save with no origin": ("POST", "/api/save", {**same, "Content-Type": "application/json"}),
        "a save from another site": (
            "POST",
            "/api/save",
            {**same, "Content-Type": "application/json", "Origin": "http://attacker.example"},
        ),
    }
    body = json.dumps({"path": "memory/x.md", "base": None, "content": "pwned"}).encode()
    for what, (method, path, headers) in refused.items():
        status, answer_headers, answer = request(ui, method, path, headers, body if method == "POST" else None)
        assert status == 403, what
        assert list(json.loads(answer)) == ["error"], what  # a reason, and nothing of the memory
        assert "Set-Cookie" not in answer_headers, what
    status, _, answer = request(ui, "GET", "/api/files", {**same, "Host": f"localhost:{ui.port}"})
    assert status == 200  # the other loopback name of this very server is fine
    assert json.loads(answer)["files"] == []  # and the refused saves wrote nothing


def test_a_save_needs_json_from_the_page_itself(ui):
    cookie = sign_in(ui)
    page = {"Cookie": cookie, "Origin": ui.origin}
    form = request(ui, "POST", "/api/save", {**page, "Content-Type": "text/plain"}, b"path=memory/x.md")
    assert form[0] == 415
    body = json.dumps({"path": "memory/x.md", "base": None, "content": "hello from the page\n"}).encode()
    status, _, answer = request(ui, "POST", "/api/save", {**page, "Content-Type": "application/json"}, body)
    assert status == 200 and json.loads(answer)["status"] == "applied"
    bad = request(ui, "POST", "/api/save", {**page, "Content-Type": "application/json"}, b"{not json")
    assert bad[0] == 422 and b"not JSON" in bad[2]


def test_a_delete_takes_the_hash_shown_and_its_undo_brings_the_file_back(ui):
    page = {"Cookie": sign_in(ui), "Origin": ui.origin, "Content-Type": "application/json"}

    def post(route: str, document: object) -> tuple[int, dict]:
        status, _, answer = request(ui, "POST", f"/api/{route}", page, json.dumps(document).encode())
        return status, json.loads(answer)

    saved = post("save", {"path": "memory/x.md", "base": None, "content": "first\n"})[1]
    for bad in ({"path": "memory/x.md"}, {"hash": saved["hash"]}, {"path": "memory/x.md", "hash": 7}, ["memory/x.md"]):
        status, answer = post("delete", bad)
        assert status == 422, (bad, answer)
    stale = "0" * 64  # another version than the one shown: refused, the file kept
    status, answer = post("delete", {"path": "memory/x.md", "hash": stale})
    assert status == 422 and "memory/x.md" in json.dumps(answer)
    assert json.loads(request(ui, "GET", "/api/file?path=memory/x.md", page)[2])["exists"]

    status, deleted = post("delete", {"path": "memory/x.md", "hash": saved["hash"]})
    assert status == 200 and deleted["deleted"] and deleted["restore_version"] >= 1
    assert not json.loads(request(ui, "GET", "/api/file?path=memory/x.md", page)[2])["exists"]
    for bad in ({"path": "memory/x.md", "version": 0}, {"path": "memory/x.md", "version": True}, {"version": 1}):
        assert post("restore", bad)[0] == 422, bad
    status, restored = post("restore", {"path": "memory/x.md", "version": deleted["restore_version"]})
    assert status == 200 and restored["changed"]
    back = json.loads(request(ui, "GET", "/api/file?path=memory/x.md", page)[2])
    assert back["exists"] and back["content"] == "first\n"
    assert request(ui, "POST", "/api/drop", page, b"{}")[0] == 404  # only the calls that change memory on purpose

    versions = json.loads(request(ui, "GET", "/api/history?path=memory/x.md", page)[2])["versions"]
    assert [v["change"] for v in versions] == ["restore", "delete", "push"]
    first = json.loads(request(ui, "GET", f"/api/file?path=memory/x.md&v={versions[-1]['version']}", page)[2])
    assert first["content"] == "first\n" and first["editable"] is False  # a past version is read, not edited
    assert request(ui, "GET", "/api/file?path=memory/x.md&v=first", page)[0] == 422
    assert json.loads(request(ui, "GET", "/api/history", page)[2])["versions"] == []  # nothing is deleted now
