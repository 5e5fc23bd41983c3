"""What the fault loop's users wrote, and the invariants checked against it after a run.

Every text a laptop's user saves (or a restore brings back) is recorded with a token unique to that write, so that
"some version, or a merge of versions" can be checked line by line and search can be asked for each write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from syncproto.wire import sha256_hex

TOKEN = re.compile(r"\bzq\d+x\d+\b")


@dataclass
class Written:
    laptop: str  # who wrote it ("restore" for a restore through the server)
    path: str
    text: str
    step: int
    digest: str = ""
    token: str | None = None  # the token this write added (None: a rename or restore, which add none)
    acknowledged_as: str | None = None  # the server's version holding it: this text, or a merge of it
    superseded: bool = False  # the same laptop saved the same file again before this one reached the server

    def __post_init__(self) -> None:
        self.digest = sha256_hex(self.text.encode("utf-8"))

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_as is not None

    def held_by(self, versions: dict[str | None, str]) -> str | None:
        """The version of `versions` (hash -> text) that holds this write: its very text, else a merge holding
        the line it added."""
        if self.digest in versions:
            return self.digest
        if self.token is None:
            return None
        return next((digest for digest, text in versions.items() if digest and self.token in text.split()), None)


@dataclass
class Ledger:
    seed: int
    writes: list[Written] = field(default_factory=list)
    lines: set[str] = field(default_factory=set)  # every line ever written, without its line ending
    counter: int = 0

    def token(self) -> str:
        self.counter += 1
        return f"zq{self.seed}x{self.counter}"

    def record(self, laptop: str, path: str, text: str, step: int, token: str | None = None) -> Written:
        self.overtaken(laptop, path)
        written = Written(laptop, path, text, step, token=token)
        self.writes.append(written)
        self.lines.update(text.splitlines())
        return written

    def overtaken(self, laptop: str, path: str) -> None:
        """The user of `laptop` saved, deleted or renamed `path` again: its earlier saves need not reach the server
        (the sync may never have seen them)."""
        for earlier in self.writes:
            if earlier.laptop == laptop and earlier.path == path and not earlier.acknowledged:
                earlier.superseded = True

    def pending(self) -> list[Written]:
        """The writes that must still reach the server."""
        return [w for w in self.writes if not w.acknowledged and not w.superseded]

    def known(self, digest: str) -> str | None:
        return next((w.text for w in self.writes if w.digest == digest), None)


def invented_lines(ledger: Ledger, files: dict[str, str]) -> list[str]:
    """Lines of `files` that no write ever held: bytes nobody wrote (each file must be a version or a merge)."""
    return [
        f"{path}: {line!r}" for path, text in files.items() for line in text.splitlines() if line not in ledger.lines
    ]


def differences(expected: dict[str, str], actual: dict[str, str], where: str) -> list[str]:
    """How `actual` (one laptop's files) differs from `expected` (the server's)."""
    found = []
    for path in sorted(expected.keys() | actual.keys()):
        if path not in actual:
            found.append(f"{where} lacks {path}")
        elif path not in expected:
            found.append(f"{where} has {path}, the server has not")
        elif expected[path] != actual[path]:
            found.append(f"{where} has another {path} than the server")
    return found


def newest_token(text: str) -> str | None:
    tokens = TOKEN.findall(text)
    return max(tokens, key=lambda t: int(t.rsplit("x", 1)[1])) if tokens else None
