"""Who may use the memory browser: a real `memory-proxy ui` and a real server, raw HTTP requests a browser, another
site's page or a DNS-rebinding attacker could send. Only this run's token opens it; its cookie then must come with
this server's own Host, from no other page."""

from __future__ import annotations

import http.client
import json
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit
from urllib.request import url2pathname

import pytest

from client_proxy.ui.guard import CONTENT_SECURITY_POLICY, SECURITY_HEADERS
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


def test_the_printed_url_opened_from_the_private_file_signs_in_with_a_same_origin_step(ui):
    """A page opened from `file://` arrives cross-site, and stays so along a redirect: no 303, a page moving on."""
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    status, headers, body = request(ui, "GET", ui.url.removeprefix(ui.origin), navigation)
    assert status == 200 and "Location" not in headers and b'http-equiv="refresh" content="0; url=/"' in body
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY and "SameSite=Strict" in headers["Set-Cookie"]
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    status, _, body = request(ui, "GET", "/", {"Cookie": cookie, "Sec-Fetch-Site": "same-origin"})
    assert status == 200 and b'<script src="/app.js"' in body
    assert request(ui, "GET", "/?token=guessed", navigation)[0] == 403
    assert request(ui, "GET", "/", {"Cookie": cookie, **navigation})[0] == 403  # only the sign-in may come from afar


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


def test_another_local_apps_odd_cookies_do_not_lock_the_user_out(ui):
    cookie = sign_in(ui)
    # cookies ignore ports: every app on 127.0.0.1 adds its own, in whatever shape it likes
    others = 'flash=Saved your settings; prefs={"theme": "dark"}; =nameless; path=/; "broken'
    for header in (f"{others}; {cookie}", f"{cookie}; {others}"):
        status, _, answer = request(ui, "GET", "/api/info", {"Cookie": header})
        assert status == 200 and json.loads(answer)["index"] == TEAM
    assert request(ui, "GET", "/api/info", {"Cookie": others})[0] == 403


def test_text_utf8_cannot_hold_and_json_nested_past_the_parser_are_refused_by_name_not_crashed_on(ui):
    page = {"Cookie": sign_in(ui), "Origin": ui.origin, "Content-Type": "application/json"}
    hostile = [  # (what the refusal names, route, body): what a signed-in page could send
        ("content", "save", b'{"path": "memory/x.md", "base": null, "content": "smile \\ud83d"}'),  # half an emoji
        ("content", "save", b'{"path": "memory/x.md", "base": null, "content": "a\xed\xa0\x80b"}'),  # CESU-8 bytes
        ("path", "delete", b'{"path": "memory/\\udc80.md", "hash": "00"}'),
        ("path", "restore", b'{"path": "memory/\\udc80.md", "version": 1}'),
        ("the body is not JSON", "save", b"[" * 100_000 + b"]" * 100_000),
    ]
    for what, route, body in hostile:
        status, _, answer = request(ui, "POST", f"/api/{route}", page, body)
        assert status == 422, (what, answer)
        assert json.loads(answer)["error"].startswith(what), (what, answer)
    assert "half of a character" in json.loads(request(ui, "POST", "/api/save", page, hostile[0][2])[2])["error"]
    status, _, answer = request(ui, "GET", "/api/file?path=memory/x.md", page)
    assert status == 200 and not json.loads(answer)["exists"]  # nothing was sent on
    log = ui.log.read_text(encoding="utf-8")
    assert "Traceback" not in log and "ERROR" not in log


def raw(ui: RunningUi, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Bytes no HTTP client would send; the answer read until the server closes."""
    with socket.create_connection(("127.0.0.1", ui.port), timeout=30) as connection:
        connection.sendall(data)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


def test_what_the_http_library_itself_refuses_still_carries_the_security_headers(ui):
    host = f"Host: 127.0.0.1:{ui.port}\r\n".encode()
    refused = {
        b"PUT / HTTP/1.1\r\n" + host + b"Content-Length: 0\r\n\r\n": 405,
        b"OPTIONS /api/files HTTP/1.1\r\n" + host + b"\r\n": 405,
        b"DELETE /api/files HTTP/1.1\r\nHost: evil.example\r\n\r\n": 405,
        b"GET / HTTP/1.1 and more\r\n" + host + b"\r\n": 400,
        b"GET / HTTP/one\r\n" + host + b"\r\n": 400,
        b"GET / HTTP/2.0\r\n" + host + b"\r\n": 505,
        b"GET /?token=" + b"x" * 70_000 + b" HTTP/1.1\r\n" + host + b"\r\n": 414,
        b"GET /\r\n\r\n": 505,  # HTTP/0.9: no headers, so no Host to check
    }
    for data, expected in refused.items():
        status, headers, body = raw(ui, data)
        assert status == expected, data[:40]
        assert {name: headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS, data[:40]
        assert headers["Content-Type"].startswith("application/json") and list(json.loads(body)) == ["error"]
        assert b"x" * 100 not in body  # nothing the client sent is echoed
    assert raw(ui, b"PUT / HTTP/1.1\r\n" + host + b"Content-Length: 0\r\n\r\n")[1]["Allow"] == "GET, POST"


STAND_IN_BROWSER = """#!{python}
import json, socket, sys
with socket.create_connection(("127.0.0.1", {port}), timeout=30) as test:
    test.sendall(json.dumps(sys.argv).encode())
"""


def test_the_browser_is_given_a_private_page_leading_to_the_url_never_the_secret_url_itself(tmp_path: Path):
    """A browser's command line is readable by every local user for as long as it runs."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        browser = tmp_path / "browser"
        browser.write_text(STAND_IN_BROWSER.format(python=sys.executable, port=listener.getsockname()[1]))
        browser.chmod(0o700)
        with (
            team(tmp_path, {"alice": {TEAM: "rw"}}) as running,
            memory_ui(running.laptops["alice"], browser=browser) as ui,
        ):
            connection, _ = listener.accept()
            with connection, connection.makefile("rb") as told:
                argv = json.loads(told.read())
            token = parse_qs(urlsplit(ui.url).query)["token"][0]
            assert len(argv) == 2 and not any(token in arg for arg in argv), argv
            page = Path(url2pathname(urlsplit(argv[1]).path))
            assert argv[1].startswith("file://") and page.is_relative_to(running.laptops["alice"].state)
            assert stat.S_IMODE(page.stat().st_mode) == 0o600 and stat.S_IMODE(page.parent.stat().st_mode) == 0o700
            content = page.read_text(encoding="utf-8")
            assert f'<meta http-equiv="refresh" content="0; url={ui.url}">' in content
            assert f'location.replace("{ui.url}")' in content
        assert ui.process.returncode == 0
        assert not page.exists() and not page.parent.exists()
