"""Running the inner app for one opened request: the index check, the inner scope, and the response stream.

The inner app sees an ordinary HTTP scope built only from the authenticated plaintext, plus `scope["user"]`
(a `ChannelUser`, Starlette's `request.user`) naming the caller, its key and its grants. Nothing from the
outer request reaches it except the client address, the ASGI server's lifespan state and `http.disconnect`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import unquote

import anyio

from channel.asgi import ASGIApp, Headers, Message, Receive, Scope
from channel.authz import ChannelAuth, ChannelUser, Identity, valid_name
from channel.codec import InnerRequest
from channel.constants import INDEX_HEADER
from channel.sealer import ResponseSealer, Revoked

REVOCATION_POLL = 1.0  # seconds between checks of the caller's key and grant while a response streams
_INDEX = INDEX_HEADER.encode()
_FRAMING = (b"content-length", b"transfer-encoding")


def user_for(identity: Identity, request: InnerRequest) -> ChannelUser | None:
    """The inner app's view of the caller, or None when the request names an index the caller may not use.

    The index comes from exactly one `x-memory-index` header; it must be a valid name with a grant.
    """
    values = [value for name, value in request.headers if name == _INDEX]
    grants = identity.caller.grants
    if not values:
        return ChannelUser(identity.name, identity.fingerprint, grants)
    index = values[0].decode("ascii", "replace")
    if len(values) > 1 or not valid_name(index) or index not in grants:
        return None
    return ChannelUser(identity.name, identity.fingerprint, grants, index, grants[index])


def still_granted(user: ChannelUser | None, identity: Identity) -> bool:
    """Whether a request opened as `user` may go on with the caller now holding the key: the same caller, with
    the same access to the request's index (a grant removed or changed ends a stream opened under the old one)."""
    if user is None:
        return True  # refused before the inner app ran: nothing streams on its behalf
    if identity.name != user.name:
        return False
    return user.index is None or identity.caller.grants.get(user.index) == user.access


def inner_scope(scope: Scope, request: InnerRequest, user: ChannelUser) -> Scope:
    """An HTTP scope for the inner app. Content-Length is recomputed from the authenticated body."""
    raw_path, _, query = request.target.partition(b"?")
    headers: Headers = [(name, value) for name, value in request.headers if name not in _FRAMING]
    if request.body or len(headers) != len(request.headers):
        headers.append((b"content-length", str(len(request.body)).encode()))
    return {
        "type": "http",
        "asgi": scope.get("asgi", {"version": "3.0"}),
        "http_version": "1.1",
        "method": request.method,
        "scheme": scope.get("scheme", "http"),
        "path": unquote(raw_path.decode("ascii")),
        "raw_path": raw_path,
        "query_string": query,
        "root_path": scope.get("root_path", ""),
        "headers": headers,
        "client": scope.get("client"),
        "server": scope.get("server"),
        "extensions": {},
        "state": dict(scope.get("state", {})),
        "user": user,
        "auth": ChannelAuth(),
    }


async def run_inner(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    request: InnerRequest,
    user: ChannelUser | None,
    sealer: ResponseSealer,
    keep_alive: Callable[[], bool],
) -> str:
    """Run the inner app for an opened request; return an error class for the log, or ''.

    Whatever happens, the outer response ends: complete, as a sealed inner error, or cut before its FINAL frame
    (which the client reports). Exception text never leaves this function. A revoked caller's stream, or one
    whose grant on its index was removed or changed, stops at the next thing the app sends (the sealer refuses
    it) or, if the app is waiting for the client, within `REVOCATION_POLL`: the app then receives
    `http.disconnect`, exactly as if the client had gone away.
    """
    if user is None:
        sent = await sealer.error(403, json.dumps({"error": "index not granted to this caller"}).encode())
        return "forbidden-index" if sent else "revoked"
    body_given = False
    revoked = False

    async def inner_receive() -> Message:
        nonlocal body_given, revoked
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        while True:  # after the body, the outer receive yields only http.disconnect
            with anyio.move_on_after(REVOCATION_POLL):
                return await receive()
            if not keep_alive():
                revoked = True
                return {"type": "http.disconnect"}

    try:
        await app(inner_scope(scope, request, user), inner_receive, sealer.send)
    except Exception as failure:
        error = _unwrap(failure)  # apps that run tasks (e.g. streaming responses) may wrap it in a group
        if isinstance(error, Revoked):
            await sealer.cut()
            return "revoked"
        if not sealer.inner_started:
            await sealer.error(500, b'{"error": "internal"}')
        elif not sealer.complete:
            await sealer.cut()
        return f"{type(error).__name__} at {_where(error)}"
    if not sealer.complete:
        await sealer.cut()
        return "revoked" if revoked or not keep_alive() else "incomplete-response"
    return ""


def _unwrap(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _where(error: BaseException) -> str:
    """Module and line where an exception was raised: enough to find it, without its (maybe secret) text."""
    trace = error.__traceback__
    if trace is None:
        return "?"
    while trace.tb_next is not None:
        trace = trace.tb_next
    return f"{trace.tb_frame.f_globals.get('__name__', '?')}:{trace.tb_lineno}"
