"""Who may talk to the memory browser: pure checks on a request's headers, and the headers every answer carries.

The page is served on 127.0.0.1 only, yet any web page the user visits can make the browser send requests there,
and a DNS name rebound to 127.0.0.1 makes them same-origin. So every request must name this server in `Host`
(rebinding sends the attacker's name), must come from no page or this one (`Origin`, `Sec-Fetch-Site`), and must
carry this run's cookie, which only the printed URL's token gives: secrets compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

LOOPBACK: Final = "127.0.0.1"
HOST_NAMES: Final = (LOOPBACK, "localhost")
SAME_SITE: Final = frozenset({"same-origin", "none"})  # Sec-Fetch-Site of this page's own requests and of typing
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Refused(Exception):
    """A request the browser refuses; the reason is for the user at the keyboard, and names no secret."""


@dataclass(frozen=True)
class Guard:
    """This run's secrets and the address it serves on."""

    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def cookie_name(self) -> str:
        return f"memory_ui_{self.port}"  # cookies ignore ports: one per run and port keeps two runs apart

    @property
    def url(self) -> str:
        """The URL to print and open: the token in it is exchanged for the cookie, then dropped from the address."""
        return f"http://{LOOPBACK}:{self.port}/?token={self.token}"

    def set_cookie(self) -> str:
        return f"{self.cookie_name}={self.session}; Path=/; HttpOnly; SameSite=Strict"

    def check_origin(self, headers: Mapping[str, str], *, unsafe: bool, signing_in: bool = False) -> None:
        """Refuse a request for another host name (DNS rebinding) or from another page. `unsafe` (a POST) must
        name its origin: browsers always send `Origin` on one. `signing_in` (the printed URL, its token checked
        next) may come from no site: the private file the browser is opened on (`redirect.py`) is `file://`."""
        allowed_hosts = {f"{name}:{self.port}" for name in HOST_NAMES}
        if (headers.get("host") or "").lower() not in allowed_hosts:
            raise Refused("wrong Host: open the address memory-proxy ui printed")
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in {f"http://{host}" for host in allowed_hosts}:
            raise Refused("request from another site")
        if unsafe and origin is None:
            raise Refused("a change must come from the memory browser's own page")
        site = headers.get("sec-fetch-site")
        if site is not None and site.lower() not in SAME_SITE and not signing_in:
            raise Refused("request from another site")

    def token_ok(self, token: str) -> bool:
        return hmac.compare_digest(token.encode("utf-8"), self.token.encode("utf-8"))

    def check_cookie(self, cookie_header: str | None) -> None:
        """Refuse a request without this run's cookie. Any other cookie, however odd, is ignored: cookies ignore
        ports, so every other app on 127.0.0.1 adds its own to the header."""
        expected = self.session.encode("utf-8")
        # No early exit: every value under our name is compared, so timing tells nothing of which one was close.
        signed_in = False
        for value in cookie_values(cookie_header or "", self.cookie_name):
            signed_in |= hmac.compare_digest(value.encode("utf-8", "replace"), expected)
        if not signed_in:
            raise Refused("not signed in: open the address memory-proxy ui printed")


def cookie_values(header: str, name: str) -> list[str]:
    """Every value of the cookies called `name` in a Cookie header: `;`-separated `name=value` pairs, split at the
    first `=`. Unlike `http.cookies.SimpleCookie`, which drops the whole header for one pair not to its taste
    (a space in a value, no name, a name like `path`), a pair it cannot read costs only that pair."""
    values = []
    for pair in header.split(";"):
        key, equals, value = pair.partition("=")
        if equals and key.strip() == name:
            values.append(value.strip())
    return values
