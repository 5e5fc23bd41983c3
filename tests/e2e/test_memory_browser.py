"""The memory browser in real headless Chromium (Debian's, driven by Playwright): `memory-proxy ui` as a real
process on one laptop, another laptop's `memory-proxy run` syncing its folder, one real server between them.
Screenshots of the main views, light and dark, land in build/screenshots/ (`make test-browser`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.sync_support import Laptop, ProductServer, eventually
from tests.ui_support import RunningUi, Team, chromium, memory_ui, screenshot, signed_in, team

pytestmark = [pytest.mark.anyio, pytest.mark.browser]

TEAM = "team"
CALLERS = {"alice": {TEAM: "rw"}, "bob": {TEAM: "rw"}, "carol": {TEAM: "r"}}
WAIT_MS = 15_000  # the longest the page may take to show something
DEPLOY = "# Deploys\n\nWe deploy with blue-green switches behind HAProxy.\nThe staging host is called kestrel.\n"
STANDUP = "# 2026-11-24\n\n## 09:12 — standup\n\nFixed the flaky sync test.\n"
PLAN = "# Plan\n\n- step one: write the parser\n- step two: ship it\n"


@pytest.fixture
def crew(tmp_path: Path) -> Iterator[Team]:
    with team(tmp_path, CALLERS) as running:
        yield running


def expect(target):  # Playwright's assertions, imported only where a browser runs
    from playwright.async_api import expect as playwright_expect

    return playwright_expect(target)


async def bob_writes(bob: Laptop, server: ProductServer, path: str, text: str) -> None:
    """Bob edits a file in his folder; his running proxy syncs it to the server."""
    bob.write(path, text)
    await eventually(lambda: server.text(TEAM, path) == text, f"bob's {path} on the server")


async def test_a_search_in_the_page_finds_a_memory_written_on_another_laptop(crew, tmp_path):
    server, laptops = crew.server, crew.laptops
    alice, bob = laptops["alice"], laptops["bob"]
    with bob.bare(), memory_ui(alice) as ui:
        await bob_writes(bob, server, "memory/deploy.md", DEPLOY)
        async with signed_in(ui, tmp_path / "chrome") as page:
            assert page.url == f"{ui.origin}/"  # the token was exchanged for the cookie and left the address bar
            await page.keyboard.press("/")
            await page.keyboard.type("how do we deploy blue-green")
            await page.keyboard.press("Enter")
            first = page.locator(".hit").first
            await expect(first).to_contain_text("memory/deploy.md#L", timeout=WAIT_MS)
            await expect(first).to_contain_text("by bob")
            await expect(page.locator(".summary")).to_contain_text("hybrid search")
            await page.keyboard.press("ArrowDown")  # the keyboard alone: from the box to the first hit, open it
            await page.keyboard.press("Enter")
            await expect(page.locator(".file-head h1")).to_have_text("memory/deploy.md", timeout=WAIT_MS)
            await expect(page.locator(".row.hl").first).to_be_visible()
            await expect(page.locator("#L3 .text")).to_have_text("We deploy with blue-green switches behind HAProxy.")
            await expect(page.locator("#L3 .ln")).to_have_text("3")


@asynccontextmanager
async def plan_in_page(crew: Team, profile: Path) -> AsyncIterator[tuple[Any, RunningUi]]:
    """Bob's plan, synced up by his running proxy, open in alice's memory browser."""
    bob = crew.laptops["bob"]
    with bob.bare(), memory_ui(crew.laptops["alice"]) as ui:
        await bob_writes(bob, crew.server, "memory/plan.md", PLAN)
        async with signed_in(ui, profile) as page:
            await page.goto(f"{ui.origin}/#/file?path=memory/plan.md")
            await expect(page.locator("#L3 .text")).to_have_text(PLAN.splitlines()[2], timeout=WAIT_MS)
            yield page, ui


async def test_an_edit_saved_in_the_page_reaches_the_other_laptop(crew, tmp_path):
    bob = crew.laptops["bob"]
    async with plan_in_page(crew, tmp_path / "chrome") as (page, _):
        await page.keyboard.press("e")
        edited = PLAN + "- step three: tell the team\n"
        await page.locator("#editor").fill(edited)
        await page.keyboard.press("Control+s")
        await expect(page.locator(".banner.ok")).to_contain_text("Saved.", timeout=WAIT_MS)
        await expect(page.locator("#L5 .text")).to_have_text("- step three: tell the team")
        await eventually(lambda: bob.read("memory/plan.md") == edited, "the page's edit in bob's folder")


async def test_a_conflicting_edit_shows_a_conflict_and_loses_nothing(crew, tmp_path):
    server, bob = crew.server, crew.laptops["bob"]
    async with plan_in_page(crew, tmp_path / "chrome") as (page, ui):
        await page.locator("#edit").click(timeout=WAIT_MS)
        mine = PLAN.replace("write the parser", "write the parser in Rust")
        await page.locator("#editor").fill(mine)
        theirs = PLAN.replace("write the parser", "write the parser in Go")
        await bob_writes(bob, server, "memory/plan.md", theirs)  # meanwhile, on bob's laptop, the same line
        await page.locator("#save").click()
        banner = page.locator("#conflict")
        await expect(banner).to_contain_text("Conflict", timeout=WAIT_MS)
        await expect(page.locator("#L3 .text")).to_have_text("- step one: write the parser in Go")
        await screenshot(page, tmp_path, "conflict-light")
        copy = await banner.locator("a").text_content()
        assert copy and copy.startswith("memory/plan.conflict-alice-")
        await banner.locator("a").click()
        await expect(page.locator("#L3 .text")).to_have_text(mine.splitlines()[2], timeout=WAIT_MS)
        await page.goto(f"{ui.origin}/#/sync")
        await expect(page.locator("main")).to_contain_text(copy, timeout=WAIT_MS)
        assert server.text(TEAM, "memory/plan.md") == theirs  # bob's newer text was not overwritten
        assert server.text(TEAM, copy) == mine  # and the page's text is kept whole
        await eventually(lambda: bob.read(copy) == mine, "the conflict copy in bob's folder")
        assert bob.read("memory/plan.md") == theirs


async def test_the_page_refuses_a_visit_without_the_token(crew, tmp_path):
    with memory_ui(crew.laptops["alice"]) as ui:
        async with chromium(tmp_path / "chrome") as context:
            page = await context.new_page()
            response = await page.goto(f"{ui.origin}/")
            assert response is not None and response.status == 403
            assert "not signed in" in await page.content()
            response = await page.goto(f"{ui.origin}/?token=not-the-token")
            assert response is not None and response.status == 403
            response = await page.goto(f"http://localhost:{ui.port}/api/files")
            assert response is not None and response.status == 403


async def test_the_private_file_memory_proxy_ui_opens_signs_the_browser_in_and_drops_the_token(crew, tmp_path):
    from client_proxy.ui.redirect import redirect_file

    with memory_ui(crew.laptops["alice"]) as ui, redirect_file(ui.url, tmp_path / "state") as opened:
        async with chromium(tmp_path / "chrome") as context:
            page = await context.new_page()
            await page.goto(opened.as_uri())  # as the browser `memory-proxy ui` starts: file://, so cross-site
            await page.wait_for_url(f"{ui.origin}/", timeout=WAIT_MS)
            await expect(page.locator("#where")).to_contain_text(TEAM, timeout=WAIT_MS)  # the API let it in
            await expect(page.locator("#tree")).to_contain_text("No files.", timeout=WAIT_MS)
            await page.reload()  # still signed in: the cookie came with a same-origin step
            await expect(page.locator("#where")).to_contain_text(TEAM, timeout=WAIT_MS)


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_main_views_render_readably_in_light_and_dark(crew, tmp_path, scheme):
    server, laptops = crew.server, crew.laptops
    alice, bob = laptops["alice"], laptops["bob"]
    with alice.bare(), bob.bare(), memory_ui(alice) as ui:
        await bob_writes(bob, server, "memory/deploy.md", DEPLOY)
        await bob_writes(bob, server, "memory/2026-11-24.md", STANDUP)
        await bob_writes(bob, server, "MEMORY.md", "# Project memory\n\n- Deploys: see memory/deploy.md\n")
        async with signed_in(ui, tmp_path / "chrome", scheme) as page:
            background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == ("rgb(247, 247, 245)" if scheme == "light" else "rgb(21, 23, 27)")
            await expect(page.locator("#tree")).to_contain_text("deploy.md", timeout=WAIT_MS)
            await page.locator("#q").fill("staging host kestrel")
            await page.keyboard.press("Enter")
            await expect(page.locator(".hit").first).to_be_visible(timeout=WAIT_MS)
            await screenshot(page, tmp_path, f"search-{scheme}")
            await page.locator(".hit-link").first.click()
            await expect(page.locator(".row.hl").first).to_be_visible(timeout=WAIT_MS)
            await screenshot(page, tmp_path, f"file-{scheme}")
            await page.locator("#by-day").click()
            await expect(page.locator("#tree")).to_contain_text("2026-11-24 Tue")
            await page.goto(f"{ui.origin}/#/sync")
            await expect(page.locator(".cards").first).to_be_visible(timeout=WAIT_MS)
            await screenshot(page, tmp_path, f"sync-{scheme}")
            await page.goto(f"{ui.origin}/#/index")
            await expect(page.locator(".cards")).to_contain_text("hybrid", timeout=WAIT_MS)
            await screenshot(page, tmp_path, f"index-{scheme}")


async def test_a_note_made_in_the_page_reaches_the_other_laptop(crew, tmp_path):
    server, bob = crew.server, crew.laptops["bob"]
    note = "# Runbook\n\nRestart the ingest worker before paging anyone.\n"
    with bob.bare(), memory_ui(crew.laptops["alice"]) as ui:
        async with signed_in(ui, tmp_path / "chrome") as page:
            await page.keyboard.press("n")
            await page.locator("#new-path").fill("memory/notes/runbook.md")
            await page.locator("#editor").fill(note)
            await screenshot(page, tmp_path, "new-note-light")
            await page.keyboard.press("Control+s")
            await expect(page.locator(".banner.ok")).to_contain_text("Saved.", timeout=WAIT_MS)
            await expect(page.locator(".file-head h1")).to_have_text("memory/notes/runbook.md")
            await expect(page.locator("#L3 .text")).to_have_text("Restart the ingest worker before paging anyone.")
            await expect(page.locator(".tree")).to_contain_text("runbook.md", timeout=WAIT_MS)
        assert server.text(TEAM, "memory/notes/runbook.md") == note
        await eventually(lambda: bob.read("memory/notes/runbook.md") == note, "the page's note in bob's folder")


async def test_a_file_deleted_in_the_page_leaves_every_laptop_and_undo_brings_it_back(crew, tmp_path):
    server, bob = crew.server, crew.laptops["bob"]
    async with plan_in_page(crew, tmp_path / "chrome") as (page, _):
        await page.locator("#delete").click(timeout=WAIT_MS)
        await expect(page.locator("#confirm-delete")).to_contain_text("Delete memory/plan.md on every laptop?")
        await screenshot(page, tmp_path, "delete-light")
        assert server.text(TEAM, "memory/plan.md") == PLAN  # asking deletes nothing
        await page.locator("#confirm").click()
        await expect(page.locator("#deleted")).to_contain_text("Deleted on every laptop.", timeout=WAIT_MS)
        await expect(page.locator("main")).to_contain_text("This file does not exist")
        await eventually(lambda: bob.read("memory/plan.md") is None, "the deletion in bob's folder")
        await page.locator("#undo").click()
        await expect(page.locator("#restored")).to_contain_text("Restored.", timeout=WAIT_MS)
        await expect(page.locator("#L3 .text")).to_have_text(PLAN.splitlines()[2])
        await eventually(lambda: bob.read("memory/plan.md") == PLAN, "the undone deletion in bob's folder")


async def test_an_older_version_read_from_the_history_is_restored_on_every_laptop(crew, tmp_path):
    server, bob = crew.server, crew.laptops["bob"]
    newer = PLAN.replace("ship it", "ship it on Friday")
    async with plan_in_page(crew, tmp_path / "chrome") as (page, _):
        await bob_writes(bob, server, "memory/plan.md", newer)
        await page.locator("#history").click(timeout=WAIT_MS)
        versions = page.locator("li.version")
        await expect(versions).to_have_count(2, timeout=WAIT_MS)
        await expect(versions.first).to_contain_text("by bob")
        await screenshot(page, tmp_path, "history-light")
        await versions.nth(1).locator("a").click()  # the older one: newest first
        await expect(page.locator("#past")).to_contain_text("read only", timeout=WAIT_MS)
        await expect(page.locator("#L4 .text")).to_have_text("- step two: ship it")
        await expect(page.locator("#edit")).to_have_count(0)  # a past version is not edited in place
        await page.locator("#restore").click()
        await expect(page.locator("#restored")).to_contain_text("Restored.", timeout=WAIT_MS)
        await expect(page.locator("#L4 .text")).to_have_text("- step two: ship it")
        await eventually(lambda: bob.read("memory/plan.md") == PLAN, "the restored version in bob's folder")


async def test_a_file_deleted_on_another_laptop_is_listed_and_restored_from_the_page(crew, tmp_path):
    server, bob = crew.server, crew.laptops["bob"]
    async with plan_in_page(crew, tmp_path / "chrome") as (page, ui):
        bob.path("memory/plan.md").unlink()
        await eventually(lambda: server.text(TEAM, "memory/plan.md") is None, "bob's deletion on the server")
        await page.goto(f"{ui.origin}/#/history")
        listed = page.locator("li.version")
        await expect(listed).to_have_count(1, timeout=WAIT_MS)
        await expect(listed).to_contain_text("deleted by bob")
        await listed.get_by_role("button", name="Restore").click()
        await expect(page.locator("#restored")).to_contain_text("Restored.", timeout=WAIT_MS)
        await expect(page.locator(".file-head h1")).to_have_text("memory/plan.md")
        await eventually(lambda: bob.read("memory/plan.md") == PLAN, "the restored file in bob's folder")


async def test_a_read_only_device_is_offered_no_change(crew, tmp_path):
    server, bob = crew.server, crew.laptops["bob"]
    with bob.bare(), memory_ui(crew.laptops["carol"]) as ui:
        await bob_writes(bob, server, "memory/plan.md", PLAN)
        async with signed_in(ui, tmp_path / "chrome") as page:
            await expect(page.locator("#where")).to_contain_text("read only", timeout=WAIT_MS)
            await page.goto(f"{ui.origin}/#/file?path=memory/plan.md")
            await expect(page.locator("#L3 .text")).to_have_text(PLAN.splitlines()[2], timeout=WAIT_MS)
            await expect(page.locator("#history")).to_be_visible()
            for change in ("#edit", "#delete"):
                await expect(page.locator(change)).to_have_count(0)
            await expect(page.locator("#new-note")).to_be_hidden()
            await page.keyboard.press("n")
            await page.keyboard.press("e")
            await expect(page.locator("#editor")).to_have_count(0)
            assert page.url.endswith("#/file?path=memory/plan.md")
