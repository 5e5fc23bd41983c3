"""`memory-server backup FILE`, `backup --verify FILE` and `restore FILE`: the data folder and its keys in one
archive, taken beside a serving server, checked, and restored into an empty data folder.

The archive holds every index (mirror files, sync state with history, search index), `callers.toml`, the server's
key pair and the non-secret settings; never a provider API key or the files holding one. It is written with mode
0600 because it holds every memory file and, unless `--without-server-key`, the server's private key.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from server.cli import config as config_cli
from server.errors import BackupError, DamagedArchiveError
from server.index_settings import TABLE
from server.settings import SECRETS, VARIABLES, Kind, file_key

POSTGRES_BACKUP = (
    "MEMORY_DATABASE_URL is set: the memory files and their history live in PostgreSQL, not in the data folder; "
    "back them up with PostgreSQL's own tools (pg_dump; docs/deploy.md)"
)
# Settings that are not the server's behaviour (where this process looks) or name a secret's file.
NOT_KEPT = {"data_dir", "keys_dir", *(f"{name.lower()}_file" for name in SECRETS)}


def register(commands: Any) -> None:
    backup = commands.add_parser(
        "backup",
        help="write one archive of every index, the callers and the server key, while the server serves",
        description=__doc__,
    )
    backup.add_argument("file", type=Path, metavar="FILE", help="the archive to write (replaced once complete)")
    backup.add_argument("--verify", action="store_true", help="check the archive FILE instead of writing one")
    backup.add_argument(
        "--without-server-key",
        action="store_true",
        help="leave the server's private key out (restore it from your own copy, or every laptop must re-pin)",
    )
    backup.set_defaults(func=cmd_backup)
    restore = commands.add_parser(
        "restore",
        help="restore an archive into an empty data folder (and the key files missing from --keys-dir)",
        description=__doc__,
    )
    restore.add_argument("file", type=Path, metavar="FILE", help="an archive written by `memory-server backup`")
    restore.set_defaults(func=cmd_restore)


def cmd_backup(args: argparse.Namespace) -> int:
    from server.backup.create import take_backup
    from server.backup.restore import verify_archive

    started = time.monotonic()
    if args.verify:
        manifest = _checked(args.file, lambda: verify_archive(args.file))
        print(f"{args.file}: sound. {_described(manifest)}")
        for warning in manifest["warnings"]:
            print(f"warning: {warning}")
        return 0
    if args.settings.database_url:  # the files are not under the data folder: an archive of it would miss them
        raise BackupError(POSTGRES_BACKUP)
    settings = render_settings(config_cli.effective(args.settings, args, os.environ))
    manifest = _guarded(
        lambda: take_backup(
            args.data_dir,
            args.keys_dir,
            args.file,
            settings=settings,
            server_key=not args.without_server_key,
            server_version=_server_version(),
        )
    )
    size = args.file.stat().st_size
    print(f"wrote {args.file} ({size / 1024:.0f} KiB, {time.monotonic() - started:.1f} s). {_described(manifest)}")
    if manifest["server_key"]:
        print("It holds the server's private key and every memory file: keep it as private as the keys folder.")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from server.backup.restore import RESTORED_SETTINGS, restore_archive

    if args.settings.database_url:
        raise BackupError(POSTGRES_BACKUP)

    manifest = _checked(args.file, lambda: restore_archive(args.file, args.data_dir, args.keys_dir))
    print(f"restored {args.file} into {args.data_dir}. {_described(manifest)}")
    written = manifest["keys_written"]
    print(f"key files written to {args.keys_dir}: {', '.join(written) if written else 'none (already there)'}")
    if manifest["keys_kept"]:
        print(f"kept the {', '.join(manifest['keys_kept'])} already there: it differs from the backup's")
    if not manifest["server_key"] and not (args.keys_dir / "server.key").exists():
        print("The archive holds no server key: put the original server.key in the keys folder before serving.")
    print(f"The backed-up server's settings (no provider keys): {args.data_dir / RESTORED_SETTINGS}")
    return 0


def _checked(archive: Path, run: Any) -> dict[str, Any]:
    try:
        return _guarded(run)
    except DamagedArchiveError as exc:
        raise DamagedArchiveError(f"{archive} cannot be trusted: {exc}; nothing was written") from None


def _guarded(run: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = run()
    except OSError as exc:
        raise BackupError(f"{exc.filename or 'the archive'}: {exc.strerror}") from None
    return result


def _described(manifest: Mapping[str, Any]) -> str:
    indexes = manifest.get("indexes", {})
    listed = ", ".join(f"{name} (revision {i['revision']}, {i['files']} files)" for name, i in sorted(indexes.items()))
    key = "with" if manifest.get("server_key") else "without"
    return f"Taken {manifest.get('created_at')}: {listed or 'no index'}; {key} the server key."


def _server_version() -> str:
    try:
        return metadata.version("agent-memory-server")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def render_settings(values: Mapping[str, tuple[object, str]]) -> str:
    """The settings as a config file (`memory-server --config` loads it to the same effective settings): every key
    the file accepts but the folders and the provider key files. A value the file cannot hold is left out, as the
    reader takes its absence: an unset one, an empty list, and min_score's auto (shown as text by `config`).
    Provider keys themselves are never among them."""
    lines = ["# The settings of the backed-up server (no provider API keys). Usable with memory-server --config.\n"]
    for variable in sorted(VARIABLES, key=file_key):
        key = file_key(variable)
        if key in NOT_KEPT or key not in values:
            continue
        value, origin = values[key]
        if _left_out(value, VARIABLES[variable]):
            continue
        lines.append(f"{key} = {_toml(value)}  # {origin}\n")
    tables: dict[str, list[str]] = {}  # [indexes.NAME]: an index's values other than the global ones
    for dotted, (value, _origin) in values.items():
        name, _, key = dotted.removeprefix(f"{TABLE}.").rpartition(".")
        if dotted.startswith(f"{TABLE}.") and value != values[key][0]:
            tables.setdefault(name, []).append(f"{key} = {_toml(value)}\n")
    for name, own in tables.items():
        lines.extend([f"\n[{TABLE}.{json.dumps(name)}]\n", *own])
    return "".join(lines)


def _left_out(value: object, kind: Kind) -> bool:
    if value is None or (isinstance(value, list | tuple) and not value):
        return True
    return kind == "number" and not isinstance(value, int | float)  # min_score's "auto (...)": no value at all


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(json.dumps(str(item)) for item in value) + "]"
    return json.dumps(str(value))
