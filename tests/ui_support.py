"""The memory browser for the tests: `memory-proxy ui` as a real process, and Debian's Chromium driven by Playwright.

with memory_ui(alice) as ui:                   # `memory-proxy ui --no-browser`, its printed URL in ui.url
    async with chromium(tmp_path) as context:  # headless, fresh profile, nothing downloaded
        page = await context.new_page()
        await page.goto(ui.url)
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlsplit

import anyio.to_thread

from tests.conftest import REPO
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "build" / "screenshots"
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class Team:
    server: ProductServer
    laptops: dict[str, Laptop]


@contextmanager
def team(folder: Path, callers: dict[str, dict[str, Any]]) -> Iterator[Team]:
    """A real server (hashing embedder: fast, deterministic) and one laptop per caller, on its first index."""
    server = ProductServer(folder / "server", HashingEmbedder(), callers)
    laptops = {name: Laptop(folder / name, server, name, next(iter(grants))) for name, grants in callers.items()}
    server.start()
    try:
        yield Team(server, laptops)
    finally:
        server.stop()


@dataclass(frozen=True)
class RunningUi:
    url: str  # with the token
    process: subprocess.Popen[str]
    log: Path  # its stderr: what the user's terminal shows

    @property
    def origin(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port


@contextmanager
def memory_ui(laptop: Laptop, *, browser: Path | None = None) -> Iterator[RunningUi]:
    """`memory-proxy ui --no-browser` for `laptop` (its project folder's sync state), stopped with SIGTERM; with
    `browser`, `memory-proxy ui` opening its page with that program (as `$BROWSER`)."""
    log = laptop.log.with_name("ui.log")
    with log.open("w", encoding="utf-8") as stderr, _started(laptop, stderr, browser) as process:
        yield RunningUi(_printed_url(process, log), process, log)


@contextmanager
def _started(laptop: Laptop, stderr: IO[str], browser: Path | None) -> Iterator[subprocess.Popen[str]]:
    params = laptop.params()
    opening = ["--no-browser"] if browser is None else []
    env = {**(params.env or {}), "MEMORY_PROXY_LOG_LEVEL": "WARNING"}
    if browser is not None:
        env["BROWSER"] = str(browser)
    process = subprocess.Popen(
        [params.command, "ui", *opening, "--project", str(laptop.project)],
        env=env,
        cwd=params.cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _printed_url(process: subprocess.Popen[str], log: Path) -> str:
    assert process.stdout is not None
    for _ in range(5):  # the URL is on the second line
        line = process.stdout.readline()
        if line.strip().startswith("http://"):
            return line.strip()
    raise AssertionError(f"memory-proxy ui printed no URL; its log {log}")


@asynccontextmanager
async def chromium(profile: Path, scheme: Literal["light", "dark"] = "light") -> AsyncIterator[Any]:
    """A headless Chromium context with a fresh profile in `profile`, in the given color scheme."""
    from playwright.async_api import async_playwright

    assert CHROMIUM.exists(), "Chromium is missing: `apt-get install -y chromium` (make test-browser does it)"
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            color_scheme=scheme,
            viewport={"width": 1280, "height": 800},
        )
        try:
            yield context
        finally:
            await context.close()


@asynccontextmanager
async def signed_in(ui: RunningUi, profile: Path, scheme: Literal["light", "dark"] = "light") -> AsyncIterator[Any]:
    """A page that opened the printed URL (so it holds the cookie), in a fresh Chromium."""
    async with chromium(profile, scheme) as context:
        page = await context.new_page()
        await page.goto(ui.url)
        yield page


async def screenshot(page: Any, folder: Path, name: str) -> Path:
    """A screenshot of the page in the test's folder, copied to build/screenshots/ (git-ignored) for people."""
    target = folder / f"{name}.png"
    await page.screenshot(path=str(target), full_page=False)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await anyio.to_thread.run_sync(shutil.copy, target, SCREENSHOTS / target.name)
    return target
