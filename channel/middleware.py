"""The server side: an ASGI middleware that answers `/v1/handshake` and `/v1/tunnel` and runs the inner app
only for authenticated, authorized, fresh frames. Every other path is 404 unless listed as plain.

Answers to peers are fixed: every handshake failure gets the same status, headers and body; every frame failure
gets one generic answer; a session the server does not know gets 401 (the request was never opened, so the
client may re-handshake and retry). The log says why, with the caller's name and key fingerprint but never
keys, frames, bodies or whole session ids.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable

from channel.admission import HandshakeAdmission
from channel.asgi import ASGIApp, BodyTooLarge, BodyTooSlow, ClientGone, Receive, Scope, Send, answer, header, read_body
from channel.authz import CallerDirectory, ChannelUser, Identity
from channel.caller_load import RETRY_AFTER, CallerLimits, CallerLoad
from channel.codec import InnerRequest, unpack_request
from channel.constants import (
    CLOCK_OFF,
    CLOCK_WINDOW,
    CONTENT_TYPE,
    HANDSHAKE_PATH,
    HELLO_LEN,
    KIND_HELLO,
    MAX_REQUEST_FRAME,
    SERVER_KEY_HEADER,
    SERVER_TIME_HEADER,
    SESSION_HEADER,
    SESSION_ID_LEN,
    TUNNEL_PATH,
    VERSION,
)
from channel.errors import FrameError, HandshakeError, StoreUnavailable
from channel.framing import decode_session_id, open_request, parse_request
from channel.handshake import Welcome, consume_initiation, create_response
from channel.inner import run_inner, still_granted, user_for
from channel.keys import PrivateKey, PublicKey
from channel.ratelimit import Rate
from channel.sealer import ResponseSealer
from channel.session import Session, SessionTable
from channel.store import SessionStore

log = logging.getLogger("channel.server")

HANDSHAKE_FAILED = b"handshake failed\n"
TOO_MANY_HANDSHAKES = b"too many handshakes\n"
BAD_FRAME = b"bad frame\n"
NO_SESSION = b"session unknown or expired\n"
TOO_SLOW = b"request body too slow\n"
TOO_BUSY = b"too many requests in flight\n"
UNAVAILABLE = b"session store unavailable\n"
_CLOSE = [(b"connection", b"close")]
_SESSION_HEADER = SESSION_HEADER.encode()
_HELLO_HEAD = bytes((VERSION, KIND_HELLO))


class ChannelMiddleware:
    """Wrap `app` so that it is reachable only through the channel.

    `callers` is asked on every handshake and request (and while responses stream) whether a key is still
    allowed, so a directory that reloads `callers.toml` revokes keys at once. `plain_paths` (exact paths) reach
    the inner app without the channel: only for things like a health check. `handshake_rate` limits each device
    key's handshakes; `failure_rate` is the one budget all failed handshakes and refused frames share (see
    `channel.admission`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        server_key: PrivateKey,
        callers: CallerDirectory,
        plain_paths: Iterable[str] = ("/healthz",),
        handshake_rate: Rate | None = None,
        failure_rate: Rate | None = None,
        clock: Callable[[], float] = time.time,
        random: Callable[[int], bytes] = os.urandom,
        sessions: SessionStore | None = None,
        clock_window: float = CLOCK_WINDOW,
        caller_limits: CallerLimits | None = None,
    ) -> None:
        self.app = app
        self._key = server_key
        self._callers = callers
        self._plain = frozenset(plain_paths)
        self._clock = clock
        self._random = random
        self._clock_window = clock_window
        self._load = CallerLoad(time.monotonic, caller_limits)
        self._admission = HandshakeAdmission(time.monotonic, per_key=handshake_rate, failures=failure_rate)
        self.sessions: SessionStore = sessions if sessions is not None else SessionTable(clock)
        # The server's public key on every handshake answer, so a client pinned to another key can name both.
        self._key_header = [(SERVER_KEY_HEADER.encode(), PublicKey(server_key.public.raw).line().encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in (TUNNEL_PATH, HANDSHAKE_PATH) and method == "POST":
            try:
                await (self._tunnel if path == TUNNEL_PATH else self._handshake)(scope, receive, send)
            except StoreUnavailable:  # raised before any answer: once a response streams, the sealer cuts it
                log.error("%s refused: the session store is unavailable", path)
                await answer(send, 503, UNAVAILABLE, [(b"retry-after", b"1")])
        elif path in self._plain:
            await self.app(scope, receive, send)
        else:
            await answer(send, 404, b"not found\n")

    # -- handshake ------------------------------------------------------------------------------------------
    async def _handshake(self, scope: Scope, receive: Receive, send: Send) -> None:
        address = _address(scope)
        try:
            message: bytes | None = await read_body(scope, receive, HELLO_LEN)
        except ClientGone:
            return
        except BodyTooSlow:
            self._refused("slow-body", address, None)
            await answer(send, 408, TOO_SLOW, _CLOSE)
            return
        except BodyTooLarge:
            message = None
        if message is None or len(message) != HELLO_LEN or message[:2] != _HELLO_HEAD:
            self._refused("malformed", address, None)  # free: refused before any cryptography
            await answer(send, 403, HANDSHAKE_FAILED, self._key_header)
            return
        if not self._admission.may_try(address):
            self._refused("flood", address, None)
            await answer(send, 429, TOO_MANY_HANDSHAKES, self._key_header)
            return
        reply, reason, identity = self._accept(message, address)
        if reply is None:
            self._refused(reason, address, identity)
            if reason == "rate-limited":
                await answer(send, 429, TOO_MANY_HANDSHAKES, self._key_header)
            elif reason == "clock-off":
                now = [(SERVER_TIME_HEADER.encode(), str(int(self._clock() * 1000)).encode())]
                await answer(send, 403, CLOCK_OFF, self._key_header + now)
            else:
                await answer(send, 403, HANDSHAKE_FAILED, self._key_header)
            return
        await answer(send, 200, reply, self._key_header, content_type=CONTENT_TYPE.encode())

    def _refused(self, reason: str, address: str, identity: Identity | None) -> None:
        """Log a refused handshake while the global failure budget lasts (see `_log_failure`)."""
        who = f" caller={identity.name} key={identity.fingerprint}" if identity else ""
        self._log_failure(reason != "flood", "handshake refused: %s address=%s%s", reason, address, who)

    def _frame_refused(self, reason: str, identity: Identity, session: Session) -> None:
        """Log a refused tunnel request while the global failure budget lasts (see `_log_failure`): anyone who
        saw a session id, which travels in clear, can send frames under it."""
        line = "tunnel refused: %s caller=%s key=%s session=%s"
        self._log_failure(True, line, reason, identity.name, identity.fingerprint, session.tag)

    def _log_failure(self, charge: bool, line: str, *args: object) -> None:
        """Charge a failure (when `charge`) to the global budget, and log it while the budget lasts; during a flood,
        a count every few seconds instead (a flood must not fill the disk with log lines)."""
        if charge and self._admission.failed():
            log.warning(line, *args)
        unlogged = self._admission.summary_due()
        if unlogged:
            log.warning("refused: %d more handshakes or frames not logged one by one (a flood)", unlogged)

    def _accept(self, message: bytes, address: str) -> tuple[bytes | None, str, Identity | None]:
        """msg2 for an acceptable msg1, else None and the reason for the log. Never awaits, so the timestamp
        check and its commit cannot interleave with another handshake."""
        try:
            hello, responder = consume_initiation(self._key, message)
        except HandshakeError:
            return None, "bad-message", None
        identity = self._callers.lookup(hello.client_static)
        if identity is None:
            return None, "unknown-key", None
        # Freshness first: a replayed msg1 gets the generic answer, never CLOCK_OFF, which would tell whoever
        # recorded it whether its key is still authorized (a revoked key gets the generic one).
        if not self.sessions.timestamp_is_fresh(hello.client_static, hello.timestamp):
            return None, "replayed-timestamp", identity
        now = self._clock()
        if abs(hello.timestamp / 1e9 - now) > self._clock_window:
            return None, "clock-off", identity
        if not self._admission.authenticated(hello.client_static, address):
            return None, "rate-limited", identity
        session_id = self._random(SESSION_ID_LEN)
        expires_at = now + self.sessions.lifetime
        welcome = Welcome(session_id, int(expires_at * 1000), int(now * 1000))
        reply, keys = create_response(responder, welcome, self._random)
        session = Session(
            id=session_id,
            caller=identity.name,
            static_key=hello.client_static,
            receive_key=keys.initiator_to_responder,
            send_key=keys.responder_to_initiator,
            created=now,
            expires_at=expires_at,
            last_used=now,
        )
        if not self.sessions.open(session, hello.timestamp):
            return None, "server-full", identity
        log.info("handshake ok caller=%s key=%s session=%s", identity.name, identity.fingerprint, session.tag)
        return reply, "", identity

    # -- tunnel ---------------------------------------------------------------------------------------------
    async def _tunnel(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        session, identity = self._live(header(scope, _SESSION_HEADER))
        if session is None or identity is None:
            log.debug("tunnel refused: no-session")
            await answer(send, 401, NO_SESSION)
            return
        declared = header(scope, b"content-length")
        size = int(declared) if declared is not None and declared.isdigit() and len(declared) <= 18 else 0
        size = min(size, MAX_REQUEST_FRAME) or MAX_REQUEST_FRAME
        if not self._load.admit(identity.name, size):
            self._frame_refused("busy", identity, session)
            await answer(send, 429, TOO_BUSY, [(b"retry-after", str(RETRY_AFTER).encode())])
            return
        try:
            opened = await self._receive_frame(scope, receive, send, session, identity)
            if opened is None:
                self._load.refund(identity.name)  # the caller's rate counts only the requests it really sent
                return
            await self._run(scope, receive, send, session, identity, opened, started)
        finally:
            self._load.release(identity.name, size)

    async def _receive_frame(
        self, scope: Scope, receive: Receive, send: Send, session: Session, identity: Identity
    ) -> tuple[InnerRequest, int] | None:
        """Read and open the request frame; or answer the refusal and return None (nothing was opened)."""
        try:
            frame = await read_body(scope, receive, MAX_REQUEST_FRAME)
        except ClientGone:
            return None
        except BodyTooSlow:
            self._frame_refused("slow-body", identity, session)
            await answer(send, 408, TOO_SLOW, _CLOSE)
            return None
        except BodyTooLarge:
            opened: tuple[InnerRequest, int] | str = "oversized"
        else:
            # Checked again after the upload, but not marked in use: only an authentic frame does that (when it is
            # committed), or whoever saw the session id could keep the session alive with garbage.
            opened = self._open(session, frame) if self._alive(session) else "no-session"
        if opened == "no-session":  # expired, revoked, or ended on another replica: the client may handshake again
            await answer(send, 401, NO_SESSION)
            return None
        if isinstance(opened, str):
            self._frame_refused(opened, identity, session)
            await answer(send, 400, BAD_FRAME)
            return None
        return opened

    async def _run(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: Session,
        identity: Identity,
        opened: tuple[InnerRequest, int],
        started: float,
    ) -> None:
        """Run the inner app for an opened request, and log it."""
        request, counter = opened
        user = user_for(identity, request)
        keep_alive = self._keep_alive_for(session, user)
        sealer = ResponseSealer(send, session, counter, keep_alive)
        error = await run_inner(self.app, scope, receive, request, user, sealer, keep_alive)
        if not log.isEnabledFor(logging.INFO):
            return
        log.info(
            "tunnel caller=%s key=%s session=%s %s %s status=%s in=%dB out=%dB %.1fms%s",
            identity.name,
            identity.fingerprint,
            session.tag,
            request.method,
            request.target.split(b"?", 1)[0].decode("ascii"),
            sealer.status,
            len(request.body),
            sealer.body_bytes,
            (time.perf_counter() - started) * 1000,
            f" error={error}" if error else "",
        )

    def _live(self, raw_id: bytes | None) -> tuple[Session | None, Identity | None]:
        """The live session named by the header, and its caller (None once its key is revoked)."""
        session_id = decode_session_id(raw_id) if raw_id is not None else None
        session = self.sessions.get(session_id) if session_id is not None else None
        if session is None:
            return None, None
        return session, self._identity(session)

    def _identity(self, session: Session) -> Identity | None:
        """The caller owning the session's key; None once the key is revoked, which ends all its sessions."""
        identity = self._callers.lookup(session.static_key)
        if identity is None:
            dropped = self.sessions.drop_key(session.static_key)
            if dropped:
                log.warning("revoked key: ended %d session(s), one was session=%s", dropped, session.tag)
        return identity

    def _open(self, session: Session, frame: bytes) -> tuple[InnerRequest, int] | str:
        """Authenticate, then commit the counter, then the request id; or the reason for refusing.

        Never awaits, so two copies of one frame cannot both pass: the first commits, the second finds it (a
        shared store commits both in one statement, so the same holds across replicas).
        """
        try:
            parsed = parse_request(frame)
        except FrameError:
            return "malformed-frame"
        if not session.window.might_accept(parsed.counter):
            return "replayed-counter"
        try:
            plaintext = open_request(session.receive_key, session.id, parsed, frame)
        except FrameError:
            return "unauthentic-frame"
        try:
            request = unpack_request(plaintext)
        except FrameError:
            session.window.accept(parsed.counter)  # authentic: its counter is used up all the same
            return "malformed-request"
        refused = self.sessions.commit_request(session, parsed.counter, request.request_id)
        return refused if refused is not None else (request, parsed.counter)

    def _alive(self, session: Session) -> bool:
        """Whether the session is still live and its key still allowed (without marking it in use)."""
        return self.sessions.get(session.id) is session and self._identity(session) is not None

    def _keep_alive_for(self, session: Session, user: ChannelUser | None) -> Callable[[], bool]:
        """For an opened request: a check that the session is live, its key still allowed and the request's
        grant unchanged, which also marks the session in use (an open response stream keeps it alive)."""

        def keep_alive() -> bool:
            if self.sessions.get(session.id) is not session:
                return False
            identity = self._identity(session)
            if identity is None or not still_granted(user, identity):
                return False
            self.sessions.touch(session)
            return True

        return keep_alive


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"
