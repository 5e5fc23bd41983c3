"""`memory-proxy ui`: open the channel, serve the memory browser on 127.0.0.1, print its URL and open it.

The process runs until Ctrl-C (or SIGTERM). The URL's token is new every run; whoever has it is this user.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import webbrowser
from contextlib import ExitStack
from typing import Any

from anyio.from_thread import start_blocking_portal

from client_proxy.config import ProxyConfig
from client_proxy.logs import configure as configure_logging
from client_proxy.remote.connection import connect
from client_proxy.settings import RunSettings

log = logging.getLogger(__name__)


def add_command(commands: Any) -> None:
    """Register `memory-proxy ui` on the CLI's subparsers."""
    ui = commands.add_parser(
        "ui",
        help="browse, search and edit memory in a web page on 127.0.0.1 (through the server)",
        description="Serve the memory browser on 127.0.0.1, print its address (with this run's secret token) and "
        "open it in the browser. The page talks to the server through the encrypted channel with this device's "
        "key; its sync view reads this project's local sync state. Stop it with Ctrl-C.",
    )
    ui.add_argument("--index", metavar="NAME", help="the index (else $MEMORY_INDEX, else proxy.toml)")
    ui.add_argument("--project", metavar="DIR", help="the project folder whose sync state to show (default: cwd)")
    ui.add_argument("--port", type=int, default=0, metavar="N", help="the port on 127.0.0.1 (default: any free one)")
    ui.add_argument("--no-browser", action="store_true", help="print the address only")
    ui.set_defaults(func=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> int:
    from client_proxy.sync import status as sync_status  # imported here: the other commands start faster
    from client_proxy.ui.api import BrowserApi
    from client_proxy.ui.http import BrowserServer

    settings = RunSettings.from_env(os.environ, index=args.index, project=args.project, log_file=None)
    configure_logging(settings.log_level, None)
    config = ProxyConfig.load(settings.home)
    settings.index_for(config)  # a missing index is said now, not on the first page load

    def local_status() -> dict[str, Any]:
        return sync_status.gather(settings, config)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(connect(settings)) as remote:
        api = BrowserApi(remote, local_status, str(settings.sync_root))
        server = BrowserServer(args.port, api, portal)
        serving = threading.Thread(target=server.serve_forever, name="ui-http", daemon=True)
        serving.start()
        try:
            print(f"memory browser for index {remote.target.index} on {remote.target.server_url}:", flush=True)
            print(f"  {server.guard.url}", flush=True)
            print("(the address holds this run's secret token; Ctrl-C stops)", flush=True)
            with ExitStack() as opened:
                if not args.no_browser and not _open_browser(server.guard.url, settings, opened):
                    print("could not open a browser: open the address above", file=sys.stderr)
                stop.wait()
        finally:
            server.shutdown()
            server.server_close()
    return 0


def _open_browser(url: str, settings: RunSettings, opened: ExitStack) -> bool:
    """Open `url` in the browser without putting it on any command line: the browser gets a private file that
    leads there (`client_proxy.ui.redirect`), kept until `opened` closes."""
    from client_proxy.ui.redirect import redirect_file

    try:
        page = opened.enter_context(redirect_file(url, settings.state_home))
    except OSError as exc:
        log.warning("ui: no page to open in the browser (%s)", exc)
        return False
    return webbrowser.open(page.as_uri())
