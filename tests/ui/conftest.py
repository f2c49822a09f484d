"""Browser fixtures: Debian's chromium driven by Playwright against the real stack (tests/fixtures/stack.py).

Every test gets fresh browser contexts (so fresh guest identities); screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.chat_page import CANDIDATE_PROMPTS, ChatPage

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
DOCS = Path(__file__).resolve().parents[2] / "docs"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def browser(chat_stack_live) -> Iterator:
    """A headless chromium, started after (and stopped before) the database and the stack fixtures; the stack's
    worker is live again after the previous test's database flush, so `hello` names the (demo) model.

    Playwright's sync API keeps an event loop in this thread while it runs, and Django refuses ORM calls where a
    loop runs; this order keeps the database set-up and flush outside it (tests use in_db_thread meanwhile).
    """
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).is_file():
        pytest.fail(f"chromium not found at {CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def open_chat(browser, chat_stack) -> Iterator:
    """open_chat(viewport=DESKTOP, context=None, path="/") -> a ChatPage, in a new browser context by default."""
    contexts = []

    def open_page(*, viewport: dict = DESKTOP, context=None, path: str = "/") -> ChatPage:
        if context is None:
            # Reduced motion: no drawer slide or blinking caret, so screenshots show settled pages.
            context = browser.new_context(viewport=viewport, base_url=chat_stack.url, reduced_motion="reduce")
            contexts.append(context)
        page = ChatPage(context.new_page())
        page.goto(path)
        return page

    yield open_page
    for context in contexts:
        context.close()


_long_prompts: list[str] = []


@pytest.fixture
def long_prompts(open_chat) -> list[str]:
    """Two prompts whose greedy demo-model answers run to max_tokens (probed once per session, as a separate guest)."""
    if not _long_prompts:
        probe = open_chat()
        found = probe.find_long_prompts(2)
        probe.page.close()
        if len(found) < 2:
            pytest.fail(
                f"no two prompts among {len(CANDIDATE_PROMPTS)} make the demo model answer at length: {found}"
            )
        _long_prompts.extend(found)
    return list(_long_prompts)
