"""Who is calling the MCP endpoint: the channel's caller, bound to the MCP sessions it opens.

The channel puts a `ChannelUser` at `scope["user"]`. The SDK's session manager binds a stateful session to the
principal that opened it only when that user is an `AuthenticatedUser`, so `CallerBoundEndpoint` presents
the caller in that form: a session id opened by one caller (name, device key and index) answers "Session not
found" to every other, exactly as an unknown id does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from channel.asgi import ASGIApp, Receive, Scope, Send, answer
from channel.authz import ChannelUser

NOT_AUTHENTICATED = json.dumps({"error": "not authenticated"}).encode()


class CallerPrincipal(AuthenticatedUser):
    """A `ChannelUser` as the SDK's principal: client id = caller name, subject = device key fingerprint, issuer =
    the index the request works on. Tools read the caller back from `channel_user`."""

    def __init__(self, user: ChannelUser) -> None:
        token = AccessToken(
            token="",
            client_id=user.name,
            scopes=[],
            subject=user.fingerprint,
            claims={"iss": f"memory-index:{user.index or ''}"},
        )
        super().__init__(token)
        self.channel_user = user


class CallerBoundEndpoint:
    """The MCP endpoint as only channel-authenticated requests reach it, each carrying a `CallerPrincipal`.

    A class rather than a function: Starlette routes a plain function as `endpoint(request) -> response`.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if not isinstance(user, ChannelUser):  # only reachable if someone serves the inner app without the channel
            await answer(send, 401, NOT_AUTHENTICATED, content_type=b"application/json")
            return
        await self.app({**scope, "user": CallerPrincipal(user)}, receive, send)


def channel_user(request: Any) -> ChannelUser | None:
    """The caller of an HTTP request (a Starlette `Request`), or None when it carries none."""
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    if isinstance(user, CallerPrincipal):
        return user.channel_user
    return user if isinstance(user, ChannelUser) else None
