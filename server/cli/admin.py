"""`memory-server keys ...` and `memory-server callers ...`: the server's identity and who may connect.

These commands touch only files in the keys directory (`--keys-dir`); they never load an embedding model.
Bad input and unsafe or broken key files end with `memory-server: error: ...` and exit code 2, leaving every
file as it was. No command ever prints a private key.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shlex
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from channel.authz import Access
from channel.errors import ChannelError
from channel.files import atomic_write
from channel.keys import (
    MAX_KEY_FILE,
    PUBLIC_FILE_MODE,
    PrivateKey,
    PublicKey,
    read_private_key,
    write_private_key,
    write_public_key,
)
from server.callers.config import CALLERS_FILE, CallerEntry, CallersConfig, CallersFileError, check_name, parse_access
from server.callers.file import prepare_keys_dir, read_callers, update_callers
from server.errors import InvalidArgumentError

SERVER_KEY_FILE = "server.key"
SERVER_PUB_FILE = "server.pub"
APPLIED = "A running server applies this within a second."

Command = Callable[[argparse.Namespace], int]


def register(commands: Any) -> None:
    """Add `keys` and `callers` to the `memory-server` subcommands."""
    keys = commands.add_parser("keys", help="the server's own key pair", description=__doc__)
    keys_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    init = keys_commands.add_parser("init", help=f"create {SERVER_KEY_FILE} (mode 0600) and {SERVER_PUB_FILE}")
    init.add_argument("--comment", default="memory-server", help="the public line's comment (default memory-server)")
    init.add_argument("--force", action="store_true", help="replace an existing key: every laptop must pin the new one")
    init.set_defaults(func=_translated(cmd_keys_init))
    show = keys_commands.add_parser("show", help="print the server's public key line and fingerprint")
    show.set_defaults(func=_translated(cmd_keys_show))

    callers = commands.add_parser("callers", help=f"which device keys may use which indexes ({CALLERS_FILE})")
    callers_commands = callers.add_subparsers(dest="callers_command", required=True, metavar="COMMAND")
    add = callers_commands.add_parser(
        "add",
        help="add a caller, or more keys or grants to one",
        description="Create the caller, or extend an existing one: new keys are added to its keys, and each "
        "--grant sets that index's access while its other grants stay (drop one with `callers grant --remove`).",
    )
    add.add_argument("name", help="caller name, e.g. alice-laptop")
    add.add_argument("--key", action="append", required=True, dest="keys", metavar="LINE", help="public key line")
    add.add_argument("--grant", action="append", default=[], dest="grants", metavar="INDEX=rw|r")
    add.set_defaults(func=_translated(cmd_callers_add))
    listing = callers_commands.add_parser("list", help="callers, their key fingerprints and grants")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_translated(cmd_callers_list))
    revoke = callers_commands.add_parser(
        "revoke", help="move a caller's keys (or one of them) to revoked_keys; they never work again"
    )
    revoke.add_argument("name")
    revoke.add_argument("--key", metavar="LINE_OR_FINGERPRINT", help="only this key (default: every active key)")
    revoke.set_defaults(func=_translated(cmd_callers_revoke))
    grant = callers_commands.add_parser(
        "grant",
        help="set or remove a caller's access to indexes",
        description="Each INDEX=rw|r sets that index's access; the caller's other grants stay. "
        "Give the INDEX=... arguments before any --remove.",
    )
    grant.add_argument("name")
    grant.add_argument("grants", nargs="*", metavar="INDEX=rw|r")
    grant.add_argument("--remove", action="append", default=[], metavar="INDEX", help="drop the grant on INDEX")
    grant.set_defaults(func=_translated(cmd_callers_grant))
    load = callers_commands.add_parser(
        "import",
        help=f"with MEMORY_DATABASE_URL: replace the callers in the database with {CALLERS_FILE}",
        description="Servers on a database read the callers from it; the file is imported on their first start "
        "only. This imports it again (a key revoked in the database cannot become active this way).",
    )
    load.add_argument(
        "--allow-no-keys",
        action="store_true",
        help="import even a file that lets no key connect (every device is locked out)",
    )
    load.set_defaults(func=_translated(cmd_callers_import))


def _translated(command: Command) -> Command:
    """Key and callers file errors are the user's to fix: report them as bad input (exit 2)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (CallersFileError, ChannelError) as exc:
            raise InvalidArgumentError(str(exc)) from None
        except OSError as exc:
            raise InvalidArgumentError(f"{exc.filename or args.keys_dir}: {exc.strerror}") from None

    return run


# keys -----------------------------------------------------------------------------------------------------


def cmd_keys_init(args: argparse.Namespace) -> int:
    keys_dir: Path = args.keys_dir
    key_path, pub_path = keys_dir / SERVER_KEY_FILE, keys_dir / SERVER_PUB_FILE
    prepare_keys_dir(keys_dir)
    if (key_path.exists() or key_path.is_symlink()) and not args.force:
        raise InvalidArgumentError(
            f"{key_path} already exists, and every laptop pins the key it holds. "
            "Print it with `memory-server keys show`; pass --force only to replace it on purpose."
        )
    key = PrivateKey.generate(args.comment)
    # The public half first: should the private key then fail to be written, the old .pub is put back and the old
    # identity stays whole (a new .pub beside the old key would hand laptops a line no server answers to).
    old_pub = _read_small_file(pub_path)
    with _naming(pub_path):
        write_public_key(pub_path, key.public)
    try:
        with _naming(key_path):
            write_private_key(key_path, key, overwrite=args.force)
    except BaseException:
        with contextlib.suppress(OSError):
            if old_pub is None:
                pub_path.unlink(missing_ok=True)
            else:
                atomic_write(pub_path, old_pub, PUBLIC_FILE_MODE)
        raise
    print(f"wrote {key_path} (private, mode 0600: never share it) and {pub_path}")
    _print_server_key(key.public)
    return 0


def cmd_keys_show(args: argparse.Namespace) -> int:
    key_path, pub_path = args.keys_dir / SERVER_KEY_FILE, args.keys_dir / SERVER_PUB_FILE
    if not (key_path.exists() or key_path.is_symlink()):
        raise InvalidArgumentError(f"no server key at {key_path}; create one with `memory-server keys init`")
    prepare_keys_dir(args.keys_dir)  # it exists (it holds the key): refused as `serve` refuses it
    public = read_private_key(key_path).public
    held = _read_small_file(pub_path)
    there = held is not None or pub_path.exists() or pub_path.is_symlink()
    if there and (held or b"").decode("utf-8", errors="replace").strip() != public.line():
        print(f"warning: {pub_path} does not match {key_path}; the line below comes from {key_path}", file=sys.stderr)
    _print_server_key(public)
    return 0


def _read_small_file(path: Path) -> bytes | None:
    """The bytes of the regular file at `path`; None for anything else (none, a symlink, a FIFO, a folder, past
    MAX_KEY_FILE bytes). Opened without following a link or waiting on a FIFO's writer, as the private key is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_KEY_FILE:
            return None
        return os.read(fd, MAX_KEY_FILE + 1)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError while writing `path` names `path`, not the temporary file it was written through."""
    try:
        yield
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {path}: {exc.strerror}") from None


def _print_server_key(public: PublicKey) -> None:
    print(f"server key:  {public.line()}")
    print(f"fingerprint: {public.fingerprint}")
    print("\nGive laptops this line; each one pins it with:")
    print(f"  memory-proxy init --server https://YOUR-SERVER --server-key {shlex.quote(public.line())}")


# callers --------------------------------------------------------------------------------------------------


def cmd_callers_add(args: argparse.Namespace) -> int:
    check_name(args.name, "caller")
    keys = [_parse_key(line) for line in args.keys]
    grants = _parse_grants(args.grants)
    before, after = _update(args, lambda config: config.add(args.name, keys, grants))
    old = before.get(args.name)
    entry = _entry(after, args.name)
    print(f"{'updated' if old else 'added'} caller {entry.name} in {_where(args)}")
    for key in keys:
        state = "already listed" if old and key in old.keys else "added"
        print(f"  key {key.fingerprint} {key.comment}: {state}".rstrip())
    print(f"  grants: {_grants_text(entry.grants)}")
    if not entry.grants:
        print(f"note: {entry.name} can connect but use no index yet: memory-server callers grant {entry.name} INDEX=rw")
    print(APPLIED)
    return 0


def cmd_callers_list(args: argparse.Namespace) -> int:
    path = _callers_path(args)
    url = _database_url(args)
    if url is not None:
        from server.postgres.callers import read_or_import

        config, found = read_or_import(url, path), True
    else:
        config, signature = read_callers(path)
        found = signature is not None
    if args.json:
        print(json.dumps([_entry_json(entry) for entry in config.callers], indent=2))
        return 0
    if not found:
        print(f"no callers file at {path}; add a device with `memory-server callers add NAME --key LINE`")
    elif not config.callers:
        print(f"no callers in {_where(args)}")
    for entry in config.callers:
        print(f"{entry.name}  grants: {_grants_text(entry.grants)}  revoked keys: {len(entry.revoked_keys)}")
        for key in entry.keys:
            print(f"  {key.fingerprint}  {key.comment}".rstrip())
        if not entry.keys:
            print("  (no active key)")
    return 0


def cmd_callers_revoke(args: argparse.Namespace) -> int:
    before, after = _update(args, lambda config: config.revoke(args.name, args.key))
    gone = [key for key in _entry(before, args.name).keys if key not in _entry(after, args.name).keys]
    if not gone:
        print(f"caller {args.name} has no active key; nothing to revoke")
        return 0
    for key in gone:
        print(f"revoked {key.fingerprint} {key.comment}".rstrip())
    print(f"{APPLIED} Sessions using a revoked key end then; the key can never be added again.")
    return 0


def cmd_callers_grant(args: argparse.Namespace) -> int:
    if not args.grants and not args.remove:
        raise InvalidArgumentError("give INDEX=rw or INDEX=r to grant, or --remove INDEX")
    grants = _parse_grants(args.grants)
    removed = [check_name(index, "index") for index in args.remove]
    _, after = _update(args, lambda config: config.grant(args.name, grants, removed))
    print(f"{args.name} grants: {_grants_text(_entry(after, args.name).grants)}")
    print(APPLIED)
    return 0


def cmd_callers_import(args: argparse.Namespace) -> int:
    url = _database_url(args)
    if url is None:
        raise InvalidArgumentError("callers import needs MEMORY_DATABASE_URL: without it the server reads the file")
    from server.postgres.callers import imported, update_shared_callers

    change = imported(_callers_path(args), allow_no_keys=args.allow_no_keys)
    _, after = update_shared_callers(url, _callers_path(args), change)
    print(f"imported {len(after.callers)} callers from {_callers_path(args)} into the database")
    print(APPLIED)
    return 0


def _callers_path(args: argparse.Namespace) -> Path:
    return Path(args.keys_dir, CALLERS_FILE)


def _database_url(args: argparse.Namespace) -> str | None:
    """MEMORY_DATABASE_URL: the callers live in PostgreSQL, shared by every replica, not in callers.toml."""
    settings = getattr(args, "settings", None)
    return getattr(settings, "database_url", None)


def _where(args: argparse.Namespace) -> str:
    return "the database" if _database_url(args) else str(_callers_path(args))


def _update(
    args: argparse.Namespace, change: Callable[[CallersConfig], CallersConfig]
) -> tuple[CallersConfig, CallersConfig]:
    """Edit callers.toml, or with a database URL the callers every replica shares."""
    url = _database_url(args)
    if url is None:
        return update_callers(_callers_path(args), change)
    from server.postgres.callers import update_shared_callers

    return update_shared_callers(url, _callers_path(args), change)


def _entry(config: CallersConfig, name: str) -> CallerEntry:
    entry = config.get(name)
    assert entry is not None, "the edit succeeded, so the caller exists"
    return entry


def _parse_key(line: str) -> PublicKey:
    try:
        return PublicKey.parse(line)
    except ChannelError as exc:  # never echo the line: it may be a private key pasted by mistake
        raise InvalidArgumentError(f"--key: {exc}") from None


def _parse_grants(items: list[str]) -> dict[str, Access]:
    grants: dict[str, Access] = {}
    for item in items:
        index, sep, access = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"grant {item!r} must look like INDEX=rw or INDEX=r")
        if index in grants:
            raise InvalidArgumentError(f"index {index!r} is granted twice")
        grants[check_name(index, "index")] = parse_access(index, access)
    return grants


def _grants_text(grants: Mapping[str, Access]) -> str:
    return ", ".join(f"{index}={access}" for index, access in grants.items()) or "none"


def _entry_json(entry: CallerEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "keys": [{"fingerprint": key.fingerprint, "comment": key.comment} for key in entry.keys],
        "grants": dict(entry.grants),
        "revoked_keys": len(entry.revoked_keys),
    }
