"""The memory browser's JSON API: each route one call (or a few) to the server through `Remote`.

Saving is a sync push (`Remote.push`) with the hash of the text the page showed as its base: the server applies
it, merges it with what changed since (three-way, as for a laptop's edit), or keeps its own newer text and stores
the page's as a conflict copy. Nobody's text is ever overwritten and the page's text is never lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio.to_thread

from client_proxy.errors import ProxyError
from client_proxy.remote.connection import Remote

LIST_PAGE: Final = 200
MAX_SEARCH_RESULTS: Final = 50
CONFLICT_MARK: Final = ".conflict-"  # conflict copies: <stem>.conflict-<caller>-<time>.md (docs/sync-protocol.md)
MAX_PAGES: Final = 100  # of a file read in pieces (each about 40,000 characters)
CHANGES: Final = frozenset({"save", "delete", "restore"})  # the POST routes, each a method of BrowserApi
MAX_HISTORY: Final = 100  # versions or deleted files a page of history holds (the server's bound)

Params = Mapping[str, str]


class BadRequestError(ProxyError):
    """The page sent something the API cannot act on."""


class BrowserApi:
    def __init__(self, remote: Remote, local_status: Callable[[], dict[str, Any]], project: str) -> None:
        self._remote = remote
        self._local_status = local_status
        self._project = project

    async def get(self, route: str, params: Params) -> dict[str, Any]:
        handlers = {"info": self.info, "search": self.search, "files": self.files, "file": self.file}
        handlers.update(status=self.status, history=self.history)
        handler = handlers.get(route)
        if handler is None:
            raise LookupError(route)
        return await handler(params)

    async def info(self, params: Params) -> dict[str, Any]:
        """Where the page looks, and this device's access to the index ("r" or "rw"; None when the server could
        not say: the page then offers changes, and the server refuses any this device may not make)."""
        target = self._remote.target
        try:
            access = (await self._remote.tool("status")).get("access")
        except ProxyError:
            access = None
        where = {"server": target.server_url, "index": target.index, "device": target.device, "project": self._project}
        return {**where, "access": access}

    async def search(self, params: Params) -> dict[str, Any]:
        query = params.get("q", "").strip()
        if not query:
            raise BadRequestError("type something to search for")
        return await self._remote.tool(
            "search",
            query=query,
            max_results=_int(params, "max", 20, 1, MAX_SEARCH_RESULTS),
            path=params.get("path") or None,
            sources=[params["source"]] if params.get("source") in ("memory", "sessions") else None,
        )

    async def files(self, params: Params) -> dict[str, Any]:
        """Every file (all pages of the listing), for browsing by folder and by day."""
        files: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await self._remote.tool("list", prefix=params.get("prefix") or None, cursor=cursor, limit=LIST_PAGE)
            files += page["files"]
            cursor = page.get("next_cursor")
            if not cursor:
                return {"files": files, "total": page["total"]}

    async def file(self, params: Params) -> dict[str, Any]:
        """The whole file, read in pieces; `editable` when the pieces are exactly the file its hash names."""
        path = params.get("path", "")
        if not path:
            raise BadRequestError("which file?")
        version = _int(params, "v", 0, 0, 2**62) or None  # a past version (read only), from the history
        first = await self._remote.tool("get", path=path, version=version)
        pieces, piece = [first["content"]], first
        for _ in range(MAX_PAGES):
            if not piece.get("truncated"):
                break
            if inside := piece.get("next_start_char"):  # it stopped inside a line longer than a piece: its rest
                where = {"start_line": piece["end_line"], "start_char": inside}
            elif piece.get("next_start_line"):
                where = {"start_line": piece["next_start_line"]}
            else:
                break
            piece = await self._remote.tool("get", path=path, version=version, **where)
            pieces.append(piece["content"] if inside else "\n" + piece["content"])
        text = "".join(pieces)
        exact = _exact_text(text, first.get("hash"))
        keys = ("path", "exists", "total_lines", "hash", "updated_by", "updated_at")
        answer = {key: first.get(key) for key in keys}
        editable = version is None and (exact is not None or not first["exists"])
        answer.update(content=text if exact is None else exact, editable=editable, version=version)
        answer["source"] = "sessions" if path.startswith("sessions/") else "memory"
        return answer

    async def history(self, params: Params) -> dict[str, Any]:
        """A file's versions, newest first (`path`); without one, the files deleted now, each with the version
        that brings it back. `before` pages on."""
        before = _int(params, "before", 0, 0, 2**62) or None
        path = params.get("path") or None
        return await self._remote.tool("history", path=path, deleted=path is None, before=before, limit=MAX_HISTORY)

    async def save(self, body: dict[str, Any]) -> dict[str, Any]:
        """Push the page's text with the hash it was read at: applied, merged, conflict (kept as a copy) or
        rejected, with the server's text after it. A new file's base is null."""
        path, base, content = body.get("path"), body.get("base"), body.get("content")
        if not isinstance(path, str) or not path or not isinstance(content, str):
            raise BadRequestError("a save needs a path and the text")
        if base is not None and not isinstance(base, str):
            raise BadRequestError("base must be the hash the text was read at, or null for a new file")
        result = await self._remote.push(path, base, content)
        return result.as_json()

    async def post(self, route: str, body: Any) -> dict[str, Any]:
        """The calls that change memory: save, delete, restore (LookupError for any other)."""
        if route not in CHANGES:
            raise LookupError(route)
        if not isinstance(body, dict):
            raise BadRequestError("expected a JSON object")
        handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] = getattr(self, route)
        return await handler(body)

    async def delete(self, body: dict[str, Any]) -> dict[str, Any]:
        """Delete the version the page showed (its hash; the server refuses once the file changed), on every laptop.
        The answer carries the version that brings it back (`restore`): a deletion is a version like any other."""
        path, shown = body.get("path"), body.get("hash")
        if not isinstance(path, str) or not path or not isinstance(shown, str) or not shown:
            raise BadRequestError("a delete needs the path and the hash of the version shown")
        result = await self._remote.tool("delete", path=path, expected_hash=shown)
        if result.get("deleted"):
            listed = await self._remote.tool("history", path=result["path"], deleted=True, limit=MAX_HISTORY)
            found = [entry for entry in listed.get("versions", []) if entry.get("path") == result["path"]]
            result["restore_version"] = found[0].get("restore_version") if found else None
        return result

    async def restore(self, body: dict[str, Any]) -> dict[str, Any]:
        """Bring back a version of a file (a deleted file's `restore_version`) as a new version."""
        path, version = body.get("path"), body.get("version")
        if not isinstance(path, str) or not path or isinstance(version, bool) or not isinstance(version, int):
            raise BadRequestError("a restore needs the path and the version to bring back")
        if version < 1:
            raise BadRequestError("version must be 1 or more")
        return await self._remote.tool("restore", path=path, version=version)

    async def status(self, params: Params) -> dict[str, Any]:
        server = await self._remote.tool("status")
        listing = await self.files({"prefix": "memory/"})
        copies = [entry for entry in listing["files"] if CONFLICT_MARK in entry["path"]]
        try:
            local: dict[str, Any] = await anyio.to_thread.run_sync(self._local_status)
        except (ProxyError, OSError) as exc:
            local = {"problem": str(exc)}
        return {"server": server, "local": local, "conflict_copies": copies}


def _exact_text(joined: str, expected: str | None) -> str | None:
    """The file's exact text from its lines joined: with or without a final newline, as its hash says."""
    for candidate in (joined + "\n", joined):
        if expected is not None and hashlib.sha256(candidate.encode("utf-8")).hexdigest() == expected:
            return candidate
    return None


def _int(params: Params, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"{name} must be a number") from None
    return max(low, min(high, value))
