"""`memory-proxy doctor`: every check in order, one line each, with the fix under each failure.

Exit status 0 when every check that ran passed, 1 otherwise. Reads only: no key, file or state is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import IO

import anyio

from channel.errors import ChannelError
from channel.keys import read_private_key
from client_proxy.config import ProxyConfig, proxy_home
from client_proxy.doctor import indexes, remote
from client_proxy.doctor.checks import (
    Result,
    check_claude,
    check_config,
    check_key_file,
    check_watcher,
    read_claude,
    skipped,
)
from client_proxy.doctor.indexes import IndexChoice
from client_proxy.settings import RunSettings

MARKS = {True: "ok  ", False: "FAIL", None: " -  "}
WARNING_MARK = "warn"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check the set-up: config, key, server, handshake, grant, clock, sync, Claude Code",
        description="One line per check, with the fix under each failure; exit status 1 when one fails.",
    )
    doctor.add_argument("--project", metavar="DIR", help="the project folder (default: the current directory)")
    doctor.add_argument("--index", metavar="NAME", help="the index (else $MEMORY_INDEX, else proxy.toml)")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    results = diagnose(os.environ, project=args.project, index=args.index)
    return report(results, sys.stdout)


def diagnose(env: Mapping[str, str], *, project: str | None, index: str | None) -> list[Result]:
    """Run every check; later checks that need what an earlier one failed to give are skipped."""
    home = proxy_home(env)
    # As Claude Code starts the proxy: in the project folder, without --project.
    settings = dataclasses.replace(
        RunSettings.from_env(env, index=index, project=project, log_file=None), project_given=False
    )
    claude = read_claude(settings.project, env)
    config_result, config = check_config(home)
    key_result = check_key_file(home)
    results = [config_result, key_result]
    if config is None or not key_result.ok:
        why = "needs the config" if config is None and key_result.ok else "needs a usable config and device key"
        results += [skipped(what, why) for what in ("server", "handshake", "grant", "clock", "file sync")]
    else:
        choices = indexes.choose(claude.servers[0] if claude.servers else None, index, env, config)
        results += anyio.run(_remote, config, settings, choices)
    results.append(check_claude(settings.project, env, claude))
    return results


async def _remote(config: ProxyConfig, settings: RunSettings, choices: list[IndexChoice]) -> list[Result]:
    reachable = await remote.check_reachable(config)
    if not reachable.ok:
        results = [reachable, *(skipped(what, "the server is not reachable") for what in ("handshake", "grant"))]
        clock = skipped("clock", "the server is not reachable")
    else:
        try:
            key = read_private_key(config.device_key_path)
        except ChannelError as exc:  # changed since check_key_file
            return [reachable, Result(False, f"device key: {exc}")]
        channel, offset = await remote.check_channel(config, key, choices)
        results = [reachable, *channel]
        if len(results) == 2:
            results.append(skipped("grant", "the handshake failed"))
        clock = remote.check_clock(offset)
    # The proxy Claude Code starts watches the folder, with the index it runs with: the first choice.
    index = choices[0].name if choices else None
    watcher = check_watcher(settings, config, index) if index else skipped("file sync", "no index chosen")
    return [*results, clock, watcher]


def report(results: list[Result], out: IO[str]) -> int:
    """Print the results; 1 when one failed."""
    for result in results:
        out.write(f"{WARNING_MARK if result.warning else MARKS[result.ok]} {result.line}\n")
        if result.ok is False and result.fix:
            out.write(f"      fix: {result.fix}\n")
        elif result.warning and result.fix:
            out.write(f"      hint: {result.fix}\n")
    failed = sum(result.ok is False for result in results)
    out.write("all checks passed\n" if not failed else f"{failed} check{'s' if failed > 1 else ''} failed\n")
    return 1 if failed else 0
