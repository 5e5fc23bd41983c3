"""The channel's errors: one root, `ChannelError`, and a few subclasses callers can act on.

Messages are for the local user (key files, pinning, configuration). What a remote peer sees is decided
elsewhere: one fixed answer per layer, never the text of these exceptions.
"""

from __future__ import annotations


class ChannelError(Exception):
    """Root of every error raised by the channel package."""


class KeyFileError(ChannelError):
    """A key file or public key line is missing, unsafe, corrupt, or of the wrong type or length."""


class ProtocolError(ChannelError):
    """A handshake message, frame or outer answer failed to parse or authenticate, or came content-coded. Carries no
    detail from the peer on purpose."""


class HandshakeError(ProtocolError):
    """A handshake message failed to parse or authenticate."""


class FrameError(ProtocolError):
    """A frame failed to parse, authenticate, or arrive in order; or a response stream ended early."""


class HandshakeRefused(HandshakeError):
    """The server refused our handshake: an unknown or revoked device key, a replayed message, or a rate limit."""

    def __init__(self, status: int, device: str) -> None:
        if status == 429:
            why = "too many handshakes from this device key, or the server is under a flood; try again in a few seconds"
        else:
            why = (
                f"this device key ({device}) is not authorized on the server (not in callers.toml, or removed), "
                "or the device clock went backwards"
            )
        super().__init__(f"the server refused the channel handshake (HTTP {status}): {why}")
        self.status = status


class ClockOff(HandshakeRefused):
    """The server refused our handshake because this device's clock is too far from the server's."""

    def __init__(self, offset: float | None) -> None:
        ChannelError.__init__(
            self,
            "the server refused the channel handshake: this device's clock is "
            + (f"{abs(offset):.0f} s {'ahead of' if offset > 0 else 'behind'}" if offset is not None else "far from")
            + " the server's. Set the clock right (enable NTP) and try again.",
        )
        self.status = 403
        self.offset = offset


class ServerKeyMismatch(ChannelError):
    """The server presents a different key from the one pinned: a hard error, never trust on first use."""

    def __init__(self, pinned: str, presented: str) -> None:
        super().__init__(
            "the server's key does not match the pinned key: "
            f"pinned {pinned}, server presents {presented}. "
            "Something between you and the server may be impersonating it. Pin the new key only after checking "
            "its fingerprint with the server's operator over another channel."
        )
        self.pinned = pinned
        self.presented = presented


class StoreUnavailable(ChannelError):
    """A session store kept elsewhere (a database shared by replicas) did not answer; the peer gets a 503."""


class TunnelRefused(ChannelError):
    """The server answered a tunnelled request with its generic refusal (bad frame, too large, no session)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the server refused the tunnelled request (HTTP {status}); {_what_ran(status)}")
        self.status = status


def _what_ran(status: int) -> str:
    """What a refusal says about whether the request ran: only some statuses prove that it did not."""
    if status in (401, 408, 413, 429):  # the channel answers these before opening the request
        return "it was not executed"
    if status == 400:  # a damaged frame, or a request id the server had already run (a retry of a lost answer)
        return "it was not executed now, but an earlier attempt of it may have run: check before repeating it"
    return "it may or may not have run (something between you and the server answered): check before repeating it"
