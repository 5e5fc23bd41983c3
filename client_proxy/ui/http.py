"""The memory browser's HTTP server: the standard library's threaded server on 127.0.0.1, each request checked by
the `Guard` before anything else, then answered with a packaged static file or a JSON API call.

API calls run on the event loop that holds the channel (a `BlockingPortal`), so every request shares one sealed
session and one MCP session. Nothing is logged but the method, the path without its query, and the status.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from anyio.from_thread import BlockingPortal

from client_proxy.remote.mcp_session import RemoteCallError, RemoteToolError
from client_proxy.ui.api import CHANGES, BadRequestError, BrowserApi
from client_proxy.ui.guard import LOOPBACK, SAME_SITE, SECURITY_HEADERS, Guard, Refused

log = logging.getLogger(__name__)

MAX_BODY: Final = 8 * 1024 * 1024  # a 2 MiB file, JSON-escaped, with room to spare
CONNECTION_TIMEOUT: Final = 30.0  # seconds a connection may stay silent, mid-request or idle between requests
MAX_CONNECTIONS: Final = 64  # open at once (a browser opens about 6); each holds a thread, even before any check
BUSY_BODY: Final = b'{"error": "too many connections"}'
BUSY: Final = (  # the answer past MAX_CONNECTIONS, written without a thread
    b"HTTP/1.1 503 Service Unavailable\r\n"
    + b"".join(f"{name}: {value}\r\n".encode("ascii") for name, value in SECURITY_HEADERS.items())
    + f"Content-Type: application/json\r\nContent-Length: {len(BUSY_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + BUSY_BODY
)
JSON: Final = "application/json; charset=utf-8"
MOVE_ON: Final = b'<!doctype html>\n<meta http-equiv="refresh" content="0; url=/">\n<title>memory browser</title>\n'
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
    block_on_close = False  # a browser's idle keep-alive connection must not hold up Ctrl-C

    def __init__(
        self,
        port: int,
        api: BrowserApi,
        portal: BlockingPortal,
        *,
        connection_timeout: float = CONNECTION_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        super().__init__((LOOPBACK, port), Handler)
        self.guard = Guard(self.server_address[1])
        self.api = api
        self.portal = portal
        self.connection_timeout = connection_timeout
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while there is a free slot; past the cap, a short 503 and the door."""
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1)  # a fresh socket's send buffer takes this at once; never wait on the peer
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._slots.release()  # before the close, so a client that saw it close finds the slot free
            self.shutdown_request(request)


class Handler(BaseHTTPRequestHandler):
    server: BrowserServer
    protocol_version = "HTTP/1.1"
    server_version = "memory-proxy-ui"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.connection_timeout)  # a silent peer is dropped, not waited on

    def do_GET(self) -> None:
        self._answer(unsafe=False)

    def do_POST(self) -> None:
        self._answer(unsafe=True)

    def _answer(self, *, unsafe: bool) -> None:
        if self.request_version == "HTTP/0.9":  # no headers, so no Host to check and none to answer with
            return self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED)
        guard = self.server.guard
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query))
        headers = {name.lower(): value for name, value in self.headers.items()}
        signing_in = url.path == "/" and "token" in params and not unsafe
        try:
            guard.check_origin(headers, unsafe=unsafe, signing_in=signing_in)
            if signing_in:
                return self._exchange(params["token"], (headers.get("sec-fetch-site") or "none").lower() in SAME_SITE)
            guard.check_cookie(headers.get("cookie"))
        except Refused as exc:
            return self._send_json(HTTPStatus.FORBIDDEN, {"error": str(exc)})
        if url.path.startswith("/api/"):
            return self._api(url.path.removeprefix("/api/"), params, unsafe=unsafe)
        if url.path in STATIC and not unsafe:
            name, kind = STATIC[url.path]
            return self._send(HTTPStatus.OK, static_file(name), kind)
        return self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such page"})

    def _exchange(self, token: str, same_site: bool) -> None:
        """The printed URL: a good token becomes the cookie, and the address loses the token. Opened from the
        private file, the navigation is cross-site, and a browser keeps it so along a redirect: a 303 would arrive
        at `/` without the `SameSite=Strict` cookie. There a page of this server's moves on instead, same-origin."""
        if not self.server.guard.token_ok(token):
            return self._send_json(HTTPStatus.FORBIDDEN, {"error": "wrong token: open the address printed last"})
        signed_in = {"Set-Cookie": self.server.guard.set_cookie()}
        if same_site:
            return self._send(HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": "/", **signed_in})
        self._send(HTTPStatus.OK, MOVE_ON, "text/html; charset=utf-8", signed_in)

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
            document = json.loads(self.rfile.read(length))
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser's stack
            raise BadRequestError("the body is not JSON") from None
        field = unencodable_field(document)
        if field is not None:
            raise BadRequestError(
                f"{field} holds half of a character (a lone surrogate, as from half an emoji): remove it and try again"
            )
        return document

    def _send_json(self, status: HTTPStatus, document: Any) -> None:
        body = json.dumps(document, ensure_ascii=False).encode("utf-8")
        self._send(status, body, JSON)

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

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a method with no `do_`, a malformed request line, a line too long),
        answered like every other: JSON with the security headers, naming nothing the client sent."""
        status = HTTPStatus(code)
        extra = {"Connection": "close"}
        if status == HTTPStatus.NOT_IMPLEMENTED:  # what the library answers a method it finds no `do_` for
            status, extra["Allow"] = HTTPStatus.METHOD_NOT_ALLOWED, "GET, POST"
        if self.request_version == "HTTP/0.9":  # left so by a line too malformed to name its version
            self.request_version = "HTTP/1.0"  # else the answer would go without its status line and headers
        self.close_connection = True
        self._send(status, json.dumps({"error": status.phrase.lower()}).encode("utf-8"), JSON, extra)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request line holds the token; `log_request` below logs what is safe

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = getattr(self, "path", "")  # unset when the request line could not be read
        log.debug("ui: %s %s %s", self.command, urlsplit(path).path, code)


def unencodable_field(document: Any) -> str | None:
    """The first field of a parsed body holding a string UTF-8 cannot encode, or None. JSON's `\\ud800` escapes
    (and CESU-8 bytes) parse to lone surrogates, which every later `.encode("utf-8")` would fail on. Walked
    without recursion: the parser allows nesting deeper than a handler thread's stack has room for."""
    pending: list[tuple[str, Any]] = [("body", document)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                # the name is checked first (popped first), so a field named in the answer is always encodable
                pending += [(key if where == "body" else f"{where}.{key}", item), (where, key)]
        elif isinstance(value, list):
            pending += [(f"{where}[{index}]", item) for index, item in enumerate(value)]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where
    return None
