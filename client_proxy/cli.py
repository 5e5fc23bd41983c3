"""`memory-proxy`: this device's side of a memory server.

`memory-proxy` (or `memory-proxy run`) is what Claude Code launches: it forwards MCP between stdio and the server.
`memory-proxy init` creates this device's key and pins the server's key; `memory-proxy show` prints the device's
public line again. Both print the command the server's operator runs to let this device in. `init` also puts
starter memory files in the project. `memory-proxy context` prints the project's memory for a Claude Code
`SessionStart` hook, from the local files only. `memory-proxy status` shows how the file sync of the project
folder stands (`run` syncs it beside the forwarding), also from local data only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import os
import shlex
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from channel.errors import ChannelError
from channel.keys import PrivateKey, read_private_key, write_private_key
from client_proxy.claude import command as claude_command
from client_proxy.config import (
    CONFIG_FILE,
    DEVICE_KEY_FILE,
    ProxyConfig,
    check_device_name,
    check_index_name,
    default_device_name,
    parse_server_key,
    prepare_home,
    proxy_home,
    render_config,
    validate_server_url,
    write_config,
)
from client_proxy.doctor import command as doctor_command
from client_proxy.errors import ProxyError
from client_proxy.forward.local_zone import local_timezone
from client_proxy.log_escape import for_terminal
from client_proxy.logs import configure as configure_logging
from client_proxy.project.context import build_context, local_today
from client_proxy.project.stack import detect_stack, read_project_files
from client_proxy.project.templates import install_templates
from client_proxy.remote.commands import add_commands as add_remote_commands
from client_proxy.run import serve
from client_proxy.settings import RunSettings
from client_proxy.sync import status as sync_status
from client_proxy.tuning import LaptopTuning
from client_proxy.ui.command import add_command as add_ui_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-proxy", description=__doc__)
    parser.set_defaults(func=cmd_run, index=None, project=None, log_file=None, no_sync=False, transcripts=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="forward MCP between stdio and the server (the default command; what Claude Code launches)",
        description="Forward MCP between stdin/stdout and the server's /mcp through the encrypted channel. "
        "Logs go to stderr (level: $MEMORY_PROXY_LOG_LEVEL, default INFO), never to stdout.",
    )
    run.add_argument("--index", metavar="NAME", help="the index to work on (else $MEMORY_INDEX, else proxy.toml)")
    run.add_argument("--project", metavar="DIR", help="the project folder (default: the current directory)")
    run.add_argument("--log-file", metavar="PATH", help="also append the log to this file")
    run.add_argument("--no-sync", action="store_true", help="forward MCP only: no file sync (or MEMORY_PROXY_SYNC=0)")
    run.add_argument(
        "--transcripts",
        action=argparse.BooleanOptionalAction,
        help="upload this project's Claude Code session transcripts, redacted, as source `sessions` (default: off; "
        "or MEMORY_PROXY_TRANSCRIPTS=1, or transcripts = true in proxy.toml)",
    )
    run.set_defaults(func=cmd_run)
    init = commands.add_parser(
        "init",
        help="create this device's key and pin the server's key",
        description="Config directory: $MEMORY_PROXY_HOME, else $XDG_CONFIG_HOME/memory-proxy, else "
        "~/.config/memory-proxy. An existing device key is kept unless --force; proxy.toml is rewritten.",
    )
    init.add_argument("--server", required=True, metavar="URL", help="the server's base URL, e.g. https://memory.lan")
    init.add_argument(
        "--server-key", required=True, metavar="LINE", help="the line `memory-server keys show` prints on the server"
    )
    init.add_argument(
        "--name", metavar="DEVICE", help="this device's caller name (default: the current one, else USER-HOST)"
    )
    init.add_argument("--index", metavar="NAME", help="the index `memory-proxy run` works on by default")
    init.add_argument("--force", action="store_true", help="replace an existing device key with a new one")
    init.add_argument("--project", metavar="DIR", help="where to put the starter memory files (default: cwd)")
    init.add_argument(
        "--no-templates", action="store_true", help="do not create MEMORY.md and memory/project-context.md"
    )
    claude_command.add_init_option(init)
    init.set_defaults(func=cmd_init)
    context = commands.add_parser(
        "context",
        help="print the project's memory for a Claude Code SessionStart hook",
        description="Print MEMORY.md (its first 200 lines) and the daily logs of today and yesterday (their last "
        "200 lines), from the local files only; always exits 0 unless the project folder is missing.",
    )
    context.add_argument("--project", metavar="DIR", help="the project folder (default: the current directory)")
    context.set_defaults(func=cmd_context)
    show = commands.add_parser("show", help="print this device's public key and the server it is pinned to")
    show.set_defaults(func=cmd_show)
    status = commands.add_parser(
        "status",
        help="how the file sync of a project folder stands (offline: never contacts the server)",
        description="Last pull and push, pending local changes, conflicts, rejected files and the last error, "
        "from this device's sync state and the files on disk.",
    )
    status.add_argument("--index", metavar="NAME", help="the index (else $MEMORY_INDEX, else proxy.toml)")
    status.add_argument("--project", metavar="DIR", help="the project folder (default: the current directory)")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=cmd_status)
    claude_command.register(commands)
    doctor_command.register(commands)
    add_remote_commands(commands)
    add_ui_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = int(args.func(args))
        if sys.stdout is not None:
            sys.stdout.flush()  # a reader gone shows here, not as "Exception ignored" at exit
        return status
    except BrokenPipeError:
        return _reader_gone()
    except (ProxyError, ChannelError) as exc:
        print(f"memory-proxy: error: {for_terminal(str(exc))}", file=sys.stderr)  # may quote the server's words
        return 2
    except OSError as exc:
        print(f"memory-proxy: error: {for_terminal(_os_error(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _reader_gone() -> int:
    """`memory-proxy get ... | head`: the reader stopped early, which is no error to report. As Python's docs on
    SIGPIPE advise, stdout is pointed at /dev/null so that the flush at exit cannot fail again; the status is a
    SIGPIPE death's (128 + 13), as `cat` or `grep` end in a pipe, which `set -o pipefail` scripts know."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no stdout, or no descriptor behind it
        pass
    return 141


def _os_error(exc: OSError) -> str:
    """'file: reason', or the reason alone when no file is named (a read of stdin, a pipe)."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename is not None else reason


def cmd_init(args: argparse.Namespace) -> int:
    project = Path(args.project or ".")
    if not args.no_templates and not project.is_dir():
        raise ProxyError(f"no project folder {project}: pass --project DIR, or --no-templates")
    home = proxy_home(os.environ)
    server_url = validate_server_url(args.server)
    server_key = parse_server_key(args.server_key)
    previous = _previous(home)
    if args.name:
        name = check_device_name(args.name)
    else:
        name = previous.device_name if previous else default_device_name(_user(), socket.gethostname())
    prepare_home(home)
    key_path = home / DEVICE_KEY_FILE
    keep = (key_path.exists() or key_path.is_symlink()) and not args.force
    if keep:
        read_private_key(key_path)  # an existing key must be sound before it is kept
    else:
        write_private_key(key_path, PrivateKey.generate(name), overwrite=args.force)
    index = check_index_name(args.index) if args.index else previous.index if previous else None
    sync, exclude = (previous.sync, previous.sync_exclude) if previous else (None, ())
    transcripts = previous.transcripts if previous else None
    text = render_config(
        server_url,
        server_key,
        name,
        index,
        sync=sync,
        sync_exclude=exclude,
        transcripts=transcripts,
        tuning=previous.tuning if previous else None,
    )
    write_config(home, text)
    config = ProxyConfig.load(home)
    print(f"{'kept the existing' if keep else 'created a new'} device key {key_path} (private, mode 0600)")
    print(f"wrote {home / CONFIG_FILE}")
    if previous and previous.server_key != server_key:
        print(f"re-pinned the server key: was {previous.server_key.fingerprint}, now {server_key.fingerprint}")
    if previous and previous.device_public != config.device_public:
        old = previous.device_public.fingerprint
        print(f"the old device key {old} is gone; ask the operator to revoke it:")
        print(f"  memory-server callers revoke {previous.device_name} --key {old}")
    _print_device(config)
    status = 0 if args.no_templates else _install_templates(project)
    if args.claude:
        claude_command.cmd_install_claude(
            argparse.Namespace(project=args.project, index=None, local=False, remove=False)
        )
    return status


def cmd_context(args: argparse.Namespace) -> int:
    today = local_today(dt.datetime.now(dt.UTC), local_timezone(os.environ))
    sys.stdout.write(build_context(Path(args.project or "."), today))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    settings = RunSettings.from_env(
        os.environ,
        index=args.index,
        project=args.project,
        log_file=args.log_file,
        no_sync=args.no_sync,
        transcripts=args.transcripts,
    )
    configure_logging(settings.log_level, settings.log_file)
    anyio.run(serve, settings)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    settings = RunSettings.from_env(os.environ, index=args.index, project=args.project, log_file=None)
    report = sync_status.gather(settings, ProxyConfig.load(settings.home))
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if args.json else sync_status.render(report))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    _print_device(ProxyConfig.load(proxy_home(os.environ)))
    return 0


def _print_device(config: ProxyConfig) -> None:
    line = config.device_public.line()
    print(f"device key:  {line}")
    print(f"fingerprint: {config.device_public.fingerprint}")
    print(f"server:      {config.server_url} (pinned key {config.server_key.fingerprint})")
    if config.index:
        print(f"index:       {config.index}")
    print("timings (MEMORY_PROXY_<KEY> in the environment, else <key> in proxy.toml):")
    for timing in LaptopTuning.resolve(os.environ, config.tuning).lines():
        print(f"  {timing}")
    print("\nOn the server, the operator lets this device in with:")
    print(f"  memory-server callers add {config.device_name} --key {shlex.quote(line)} --grant INDEX=rw")
    print("(INDEX is the index this device may use; =r for read-only; repeat --grant for more indexes.)")


def _install_templates(project: Path) -> int:
    """The starter memory files; 1 when one could not be written (the key and proxy.toml are done by then)."""
    outcomes = install_templates(project, detect_stack(read_project_files(project)))
    print(f"\nMemory files in {project.absolute()}:")
    for outcome in outcomes:
        if outcome.status == "failed":
            print(f"memory-proxy: error: could not create {outcome.path}: {outcome.reason}", file=sys.stderr)
        else:
            print(f"  {'created' if outcome.status == 'created' else 'kept the existing'} {outcome.path}")
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def _previous(home: Path) -> ProxyConfig | None:
    """The configuration being replaced, to report a changed pin or device key; None if absent or unreadable."""
    try:
        return ProxyConfig.load(home)
    except (ProxyError, ChannelError):
        return None


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry, as in some containers
        return "user"
