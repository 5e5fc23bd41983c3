"""Identity keys: the one-line forms, fingerprints, and private key files that are refused when unsafe."""

from __future__ import annotations

import base64
import hashlib
import os
import stat

import pytest
from nacl import bindings

from channel.errors import KeyFileError
from channel.keys import PrivateKey, PublicKey, fingerprint, parse_private_key, read_private_key, write_private_key
from channel.keys import write_public_key as write_public

SEED = bytes(range(32))
# The eight small-order points of Ed25519 in their canonical encodings (and the all-zero string).
SMALL_ORDER = [
    "0100000000000000000000000000000000000000000000000000000000000000",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
]


def test_a_public_key_line_round_trips_with_its_comment():
    key = PrivateKey(SEED, "alice@laptop").public
    line = key.line()
    assert line.startswith("memory-ed25519 ") and line.endswith(" alice@laptop")
    again = PublicKey.parse(line)
    assert again == key and again.comment == "alice@laptop" and again.x25519 == key.x25519


@pytest.mark.parametrize("comment", ["evil\x1b[2J", "two\nlines", "bell\x07", "rtl\u202eoverride", "x" * 201])
def test_a_comment_with_control_characters_or_too_long_is_refused(comment):
    raw = PrivateKey(SEED).public.raw
    with pytest.raises(KeyFileError, match="printable"):
        PublicKey(raw, comment)


def test_a_private_key_with_a_non_ascii_comment_is_refused_before_any_file_is_written(tmp_path):
    with pytest.raises(KeyFileError, match="comment must be ASCII"):
        PrivateKey.generate("José-server")
    # a public line may hold one (it is UTF-8 wherever it is written)
    assert PublicKey(PrivateKey(SEED).public.raw, "José-server").line().endswith(" José-server")
    key = PrivateKey(SEED, "ascii-only")
    write_private_key(tmp_path / "k" / "server.key", key)
    assert read_private_key(tmp_path / "k" / "server.key").public.comment == "ascii-only"


def test_the_fingerprint_is_sha256_of_the_raw_key_like_ssh():
    key = PrivateKey(SEED).public
    expected = "SHA256:" + base64.b64encode(hashlib.sha256(key.raw).digest()).decode().rstrip("=")
    assert key.fingerprint == fingerprint(key.raw) == expected
    assert len(key.fingerprint) == len("SHA256:") + 43


def test_the_noise_static_key_is_libsodiums_x25519_form():
    private = PrivateKey(SEED)
    assert private.public.x25519 == bindings.crypto_sign_ed25519_pk_to_curve25519(private.public.raw)
    assert bindings.crypto_scalarmult_base(private.x25519) == private.public.x25519


def test_a_private_keys_repr_never_shows_the_secret():
    private = PrivateKey(SEED)
    assert SEED.hex() not in repr(private) and base64.b64encode(SEED).decode() not in repr(private)
    assert private.public.fingerprint in repr(private)


@pytest.mark.parametrize("encoded", SMALL_ORDER)
def test_small_order_and_all_zero_public_keys_are_refused(encoded):
    with pytest.raises(KeyFileError):
        PublicKey(bytes.fromhex(encoded))


@pytest.mark.parametrize(
    "line",
    [
        "",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB0= x",
        "memory-ed25519",
        "memory-ed25519 not*base64",
        "memory-ed25519 " + base64.b64encode(bytes(31)).decode(),
        "memory-ed25519 " + base64.b64encode(bytes(33)).decode(),
        "memory-ed25519-private " + base64.b64encode(bytes(64)).decode(),
    ],
)
def test_malformed_public_key_lines_are_refused(line):
    with pytest.raises(KeyFileError):
        PublicKey.parse(line)


def test_a_written_private_key_reads_back_with_mode_0600_in_a_0700_directory(tmp_path):
    path = tmp_path / "new" / "device.key"
    key = PrivateKey.generate("laptop")
    write_private_key(path, key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = read_private_key(path)
    assert again.public == key.public and again.x25519 == key.x25519 and again.public.comment == "laptop"
    assert [p.name for p in path.parent.iterdir()] == ["device.key"]  # no temporary file left behind


def test_an_existing_key_is_never_replaced_unless_asked(tmp_path):
    path = tmp_path / "device.key"
    first = PrivateKey.generate()
    write_private_key(path, first)
    with pytest.raises(KeyFileError, match="already exists"):
        write_private_key(path, PrivateKey.generate())
    assert read_private_key(path).public == first.public
    second = PrivateKey.generate()
    write_private_key(path, second, overwrite=True)
    assert read_private_key(path).public == second.public


def test_a_dangling_symlink_is_not_followed_when_writing(tmp_path):
    target = tmp_path / "elsewhere.key"
    link = tmp_path / "device.key"
    link.symlink_to(target)
    with pytest.raises(KeyFileError, match="already exists"):
        write_private_key(link, PrivateKey.generate())
    assert not target.exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o666, 0o620])
def test_a_private_key_readable_or_writable_by_others_is_refused_with_the_fix(tmp_path, mode):
    path = tmp_path / "device.key"
    write_private_key(path, PrivateKey.generate())
    os.chmod(path, mode)
    with pytest.raises(KeyFileError, match="chmod 600"):
        read_private_key(path)


def test_a_symlinked_private_key_is_refused(tmp_path):
    real = tmp_path / "real.key"
    write_private_key(real, PrivateKey.generate())
    link = tmp_path / "device.key"
    link.symlink_to(real)
    with pytest.raises(KeyFileError, match="symlink"):
        read_private_key(link)


def test_a_missing_or_non_regular_private_key_is_refused(tmp_path):
    with pytest.raises(KeyFileError, match="no private key"):
        read_private_key(tmp_path / "absent.key")
    directory = tmp_path / "dir.key"
    directory.mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_private_key(directory)


def _private_file(tmp_path, content: bytes):
    path = tmp_path / "device.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, content)
    os.close(fd)
    return path


def _encoded(raw: bytes) -> bytes:
    return b"memory-ed25519-private " + base64.b64encode(raw) + b"\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"\xff\xfe garbage", "not a text key file"),
        (b"memory-ed25519-private", "no key after"),
        (b"memory-ed25519-private ***", "not valid base64"),
        (_encoded(SEED), "wrong length"),
        (_encoded(bytes(65)), "wrong length"),
        (b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", "not a memory Ed25519 private key"),
        (PrivateKey(SEED).public.line().encode(), "holds a public key"),
        (b"x" * 5000, "too large"),
    ],
)
def test_corrupt_or_wrong_type_private_keys_are_refused_with_a_clear_message(tmp_path, content, message):
    with pytest.raises(KeyFileError, match=message):
        read_private_key(_private_file(tmp_path, content))


def test_a_seed_corrupted_in_place_is_detected_not_taken_for_another_key():
    key = PrivateKey(SEED)
    text = key.file_text().split()
    raw = bytearray(base64.b64decode(text[1]))
    raw[3] ^= 0x01
    with pytest.raises(KeyFileError, match="does not produce the public key"):
        parse_private_key(b"memory-ed25519-private " + base64.b64encode(bytes(raw)))


def test_a_public_key_file_is_one_line(tmp_path):
    key = PrivateKey.generate("server").public
    path = tmp_path / "server.pub"
    write_public(path, key)
    assert path.read_text() == key.line() + "\n"
    assert PublicKey.parse(path.read_text()) == key


def test_a_caller_table_names_a_key_listed_twice_or_shared_between_callers():
    from channel.authz import Caller, CallerTable
    from channel.errors import ChannelError

    key = PrivateKey(SEED, "laptop").public
    with pytest.raises(ChannelError, match=r"listed twice"):
        CallerTable([Caller("alice", (key, key), {})])
    with pytest.raises(ChannelError, match=r"listed for both alice and bob"):
        CallerTable([Caller("alice", (key,), {}), Caller("bob", (key,), {})])
