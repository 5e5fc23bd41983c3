"""Ed25519 identity keys: generation, the one-line public form, fingerprints and safe private key files.

A public key is shown as `memory-ed25519 <base64> <comment>` and fingerprinted like SSH, as
`SHA256:<unpadded base64 of sha256(raw key)>`. The Noise static key of an identity is the key's X25519 form.
A private key file holds one ASCII line, `memory-ed25519-private <base64 of seed and public key> [comment]`, and
must be a regular file of mode 0600 (no group or world bits), never a symlink. The public half is there so a corrupted
seed is detected instead of silently becoming another, unknown identity.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import stat
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nacl import bindings
from nacl.exceptions import CryptoError

from channel.errors import KeyFileError
from channel.files import atomic_write

PUBLIC_PREFIX = "memory-ed25519"
PRIVATE_PREFIX = "memory-ed25519-private"
SEED_LEN = 32
PRIVATE_LEN = SEED_LEN + 32  # seed, then the public key it must produce
MAX_KEY_FILE = 4096
MAX_COMMENT = 200
PUBLIC_FILE_MODE = 0o644


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key, validated on construction (its X25519 form must exist and not be low order)."""

    raw: bytes
    comment: str = field(default="", compare=False)
    x25519: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.raw) != 32:
            raise KeyFileError(f"an Ed25519 public key has 32 bytes, not {len(self.raw)}")
        # No control characters at all: comments are printed to terminals (`callers list`), where escape
        # sequences in a pasted key line could rewrite what the operator sees.
        if len(self.comment) > MAX_COMMENT or any(unicodedata.category(c) in ("Cc", "Cf") for c in self.comment):
            raise KeyFileError("a key comment is one short line of printable text")
        try:
            converted = bindings.crypto_sign_ed25519_pk_to_curve25519(self.raw)
        except (CryptoError, ValueError, TypeError):
            raise KeyFileError("not a usable Ed25519 public key (invalid or low-order point)") from None
        object.__setattr__(self, "x25519", converted)

    @classmethod
    def parse(cls, line: str) -> PublicKey:
        """Read `memory-ed25519 <base64> [comment]`."""
        parts = line.strip().split(maxsplit=2)
        if not parts or parts[0] != PUBLIC_PREFIX:
            if parts and parts[0] == PRIVATE_PREFIX:
                raise KeyFileError("this is a private key, not a public key line: keep it secret")
            raise KeyFileError(f"a public key line starts with '{PUBLIC_PREFIX} '")
        if len(parts) < 2:
            raise KeyFileError("the public key line has no key after its prefix")
        raw = _b64decode(parts[1], "public key")
        return cls(raw, parts[2] if len(parts) > 2 else "")

    def line(self) -> str:
        """The one-line public form, with the comment when there is one."""
        text = f"{PUBLIC_PREFIX} {base64.b64encode(self.raw).decode('ascii')}"
        return f"{text} {self.comment}" if self.comment else text

    @property
    def fingerprint(self) -> str:
        """`SHA256:<base64>` of the raw key, as SSH shows it."""
        return fingerprint(self.raw)


def fingerprint(raw: bytes) -> str:
    """`SHA256:<unpadded base64 of sha256(raw)>`, as SSH shows key fingerprints."""
    digest = hashlib.sha256(raw).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


class PrivateKey:
    """An Ed25519 key pair from its 32-byte seed. Its repr never shows the secret."""

    __slots__ = ("_seed", "_signing", "public", "x25519")

    def __init__(self, seed: bytes, comment: str = "") -> None:
        if len(seed) != SEED_LEN:
            raise KeyFileError(f"an Ed25519 private key seed has {SEED_LEN} bytes, not {len(seed)}")
        if not comment.isascii():  # the key file is ASCII (`parse_private_key`); a public line may hold more
            raise KeyFileError("a private key's comment must be ASCII text: it is kept in the key file, which is ASCII")
        public_raw, signing = bindings.crypto_sign_seed_keypair(seed)
        self._seed = seed
        self._signing = signing
        self.public = PublicKey(public_raw, comment)
        self.x25519 = bindings.crypto_sign_ed25519_sk_to_curve25519(signing)

    @classmethod
    def generate(cls, comment: str = "", random: Callable[[int], bytes] = os.urandom) -> PrivateKey:
        """A new key pair from `random` (the OS generator unless a test pins it)."""
        return cls(random(SEED_LEN), comment)

    def __repr__(self) -> str:
        return f"PrivateKey(public={self.public.fingerprint})"

    def file_text(self) -> str:
        """The one-line private key file content: the secret. Write it only with `write_private_key`."""
        encoded = base64.b64encode(self._seed + self.public.raw).decode("ascii")
        text = f"{PRIVATE_PREFIX} {encoded}"
        return f"{text} {self.public.comment}\n" if self.public.comment else text + "\n"


def read_private_key(path: Path) -> PrivateKey:
    """Load a private key, refusing a symlink, a non-regular file, group/world access, or bad content."""
    try:  # O_NONBLOCK: a FIFO named as the key must not hang the process; fstat below refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise KeyFileError(f"no private key at {path}") from None
    except OSError as exc:
        if os.path.islink(path):
            raise KeyFileError(f"refusing private key {path}: it is a symlink; point at the real file") from None
        raise KeyFileError(f"cannot open private key {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"refusing private key {path}: not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise KeyFileError(
                f"refusing private key {path}: mode {mode:04o} lets other users read or change it; "
                f"run: chmod 600 {path}"
            )
        if info.st_size > MAX_KEY_FILE:
            raise KeyFileError(f"refusing private key {path}: too large to be a key file")
        data = os.read(fd, MAX_KEY_FILE + 1)
    finally:
        os.close(fd)
    return parse_private_key(data, path)


def parse_private_key(data: bytes, where: object = "private key") -> PrivateKey:
    """Parse the content of a private key file; `where` names it in error messages."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileError(f"{where} is corrupt: not a text key file") from None
    parts = text.strip().split(maxsplit=2)
    if not parts:
        raise KeyFileError(f"{where} is empty")
    if parts[0] == PUBLIC_PREFIX:
        raise KeyFileError(f"{where} holds a public key, not a private key")
    if parts[0] != PRIVATE_PREFIX:
        raise KeyFileError(f"{where} is not a memory Ed25519 private key (expected '{PRIVATE_PREFIX} ...')")
    if len(parts) < 2:
        raise KeyFileError(f"{where} is corrupt: no key after the prefix")
    raw = _b64decode(parts[1], str(where))
    if len(raw) != PRIVATE_LEN:
        raise KeyFileError(f"{where} has the wrong length: {len(raw)} bytes, expected {PRIVATE_LEN}")
    key = PrivateKey(raw[:SEED_LEN], parts[2] if len(parts) > 2 else "")
    if not hmac.compare_digest(key.public.raw, raw[SEED_LEN:]):
        raise KeyFileError(f"{where} is corrupt: its seed does not produce the public key stored with it")
    return key


def write_private_key(path: Path, key: PrivateKey, *, overwrite: bool = False) -> None:
    """Write atomically with mode 0600, creating missing directories with mode 0700. Never replaces an existing
    file (or symlink) unless `overwrite`, and the no-replace check is atomic (a hard link, not exists-then-write)."""
    _atomic_write(path, key.file_text().encode("ascii"), 0o600, overwrite=overwrite)


def write_public_key(path: Path, key: PublicKey) -> None:
    """Write the one-line public form atomically (mode 0644), replacing any previous file."""
    _atomic_write(path, (key.line() + "\n").encode("utf-8"), PUBLIC_FILE_MODE, overwrite=True)


def _atomic_write(path: Path, data: bytes, mode: int, *, overwrite: bool) -> None:
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        os.chmod(directory, 0o700)  # mkdir's mode is masked by the umask
    try:
        atomic_write(path, data, mode, overwrite=overwrite)
    except FileExistsError:
        raise KeyFileError(f"{path} already exists; refusing to replace a key") from None


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise KeyFileError(f"{what} is corrupt: not valid base64") from None
