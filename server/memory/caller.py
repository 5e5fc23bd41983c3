"""Who is calling and on which index, and what they may do there: checked against the grants on every call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from channel.authz import ChannelUser
from server.errors import PermissionDeniedError
from server.index.naming import validate_name

Access = Literal["r", "rw"]


@dataclass(frozen=True)
class CallerContext:
    """Who is calling and on which index, as the channel authenticated them."""

    name: str
    fingerprint: str
    grants: Mapping[str, Access]
    index: str
    access: Access

    @classmethod
    def from_user(cls, user: ChannelUser) -> CallerContext:
        """From the channel's `request.user`; PermissionDeniedError when the request names no granted index."""
        if user.index is None:
            raise PermissionDeniedError("no index selected: the proxy must name one of the caller's indexes")
        access = user.access or user.grants.get(user.index)
        if access is None:
            raise PermissionDeniedError(f"caller {user.name} has no access to index {user.index}")
        return cls(user.name, user.fingerprint, dict(user.grants), user.index, access)


def authorise(caller: CallerContext, *, write: bool = False) -> tuple[str, Access]:
    """The caller's index and effective access, checked against the grants on every call."""
    if not isinstance(caller, CallerContext):
        raise PermissionDeniedError("no authenticated caller")
    granted = caller.grants.get(caller.index)
    if granted is None:
        raise PermissionDeniedError(f"caller {caller.name} has no access to index {caller.index}")
    validate_name(caller.index)
    access: Access = "rw" if granted == "rw" and caller.access == "rw" else "r"
    if write and access != "rw":
        raise PermissionDeniedError(
            f"caller {caller.name} may only read index {caller.index}; writing and deleting need rw access"
        )
    return caller.index, access
