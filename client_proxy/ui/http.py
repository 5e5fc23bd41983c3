"""The memory browser's HTTP server: the standard library's threaded server on 127.0.0.1, each request checked by
the `Guard` before anything else, then answered with a packaged static file or a JSON API call.

API calls run on the event loop that holds the channel (a `BlockingPortal`), so every request shares one sealed
session and one MCP session. Nothing is logged but the method, the path without its query, and the status.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from anyio.from_thread import BlockingPortal

from client_proxy.remote.mcp_session import RemoteCallError, RemoteToolError
from client_proxy.ui.api import CHANGES, BadRequestError, BrowserApi
from client_proxy.ui.guard import LOOPBACK, SECURITY_HEADERS, Guard, Refused

log = logging.getLogger(__name__)

MAX_BODY: Final = 8 * 1024 * 1024  # a 2 MiB file, JSON-escaped, with room to spare
STATIC: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/icon.svg": ("icon.svg", "image/svg+xml"),
}


def static_file(name: str) -> bytes:
    return resources.files("client_proxy.ui").joinpath("static", name).read_bytes()


class BrowserServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, api: BrowserApi, portal: BlockingPortal) -> None:
        super().__init__((LOOPBACK, port), Handler)
        self.guard = Guard(self.server_address[1])
        self.api = api
        self.portal = portal


class Handler(BaseHTTPRequestHandler):
    server: BrowserServer
    protocol_version = "HTTP/1.1"
    server_version = "memory-proxy-ui"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer(unsafe=False)

    def do_POST(self) -> None:
        self._answer(unsafe=True)

    def _answer(self, *, unsafe: bool) -> None:
        guard = self.server.guard
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            guard.check_origin(headers, unsafe=unsafe)
            if url.path == "/" and "token" in params and not unsafe:
                return self._exchange(params["token"])
            guard.check_cookie(headers.get("cookie"))
        except Refused as exc:
            return self._send_json(HTTPStatus.FORBIDDEN, {"error": str(exc)})
        if url.path.startswith("/api/"):
            return self._api(url.path.removeprefix("/api/"), params, unsafe=unsafe)
        if url.path in STATIC and not unsafe:
            name, kind = STATIC[url.path]
            return self._send(HTTPStatus.OK, static_file(name), kind)
        return self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such page"})

    def _exchange(self, token: str) -> None:
        """The printed URL: a good token becomes the cookie, and the address loses the token."""
        if not self.server.guard.token_ok(token):
            return self._send_json(HTTPStatus.FORBIDDEN, {"error": "wrong token: open the address printed last"})
        self._send(
            HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": "/", "Set-Cookie": self.server.guard.set_cookie()}
        )

    def _api(self, route: str, params: dict[str, str], *, unsafe: bool) -> None:
        api, portal = self.server.api, self.server.portal
        try:
            if unsafe:
                if route not in CHANGES:
                    return self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such call"})
                if not (self.headers.get("content-type") or "").startswith("application/json"):
                    return self._send_json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, {"error": "send JSON"})
                result = portal.call(api.post, route, self._body())
            else:
                result = portal.call(partial(api.get, route, params))
        except LookupError:
            return self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such call"})
        except (BadRequestError, RemoteToolError) as exc:
            return self._send_json(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": str(exc)})
        except RemoteCallError as exc:
            return self._send_json(HTTPStatus.BAD_GATEWAY, {"error": str(exc)})
        except Exception:
            log.exception("ui: %s failed", route)
            return self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; see the terminal"})
        self._send_json(HTTPStatus.OK, result)

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("content-length") or "0")
        except ValueError:
            raise BadRequestError("bad Content-Length") from None
        if not 0 < length <= MAX_BODY:
            raise BadRequestError(f"the text must be at most {MAX_BODY} bytes")
        try:
            return json.loads(self.rfile.read(length))
        except ValueError:
            raise BadRequestError("the body is not JSON") from None

    def _send_json(self, status: HTTPStatus, document: Any) -> None:
        body = json.dumps(document, ensure_ascii=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _send(self, status: HTTPStatus, body: bytes, kind: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if status >= HTTPStatus.BAD_REQUEST:
            self.close_connection = True  # a refused POST's body is left unread: this connection is done
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request line holds the token; `log_request` below logs what is safe

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("ui: %s %s %s", self.command, urlsplit(self.path).path, code)
