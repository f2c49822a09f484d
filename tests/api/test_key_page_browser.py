"""The key page in a real browser (Debian's chromium via Playwright) on a phone-sized screen: a signed-up user
creates a key, an OpenAI client uses it, the page never shows it again, and revoking it locks the client out."""

from __future__ import annotations

import os
from pathlib import Path

import openai
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PHONE = {"width": 390, "height": 844}


def test_a_user_creates_uses_and_revokes_a_key_in_the_browser(chat_stack_live):
    stack = chat_stack_live
    web = Client()
    web.force_login(get_user_model().objects.create_user("keyholder", password="pw-keyholder-1"))
    session = web.cookies["sessionid"].value
    model = Path(stack.env["LLM_MODEL"]).name
    from playwright.sync_api import (
        sync_playwright,  # no ORM below: Playwright runs an event loop in this thread
    )

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            context = browser.new_context(viewport=PHONE)
            context.add_cookies([{"name": "sessionid", "value": session, "url": stack.url}])
            page = context.new_page()
            page.goto(f"{stack.url}/keys/")
            page.fill("#key-name", "phone")
            page.click("button:has-text('Create key')")
            secret = page.input_value("#new-key")
            assert secret.startswith("sk-")
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "api-keys-phone.png"), full_page=True)

            client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=secret, max_retries=0, timeout=120)
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
            assert reply.usage.completion_tokens >= 1

            page.goto(f"{stack.url}/keys/")
            assert secret not in page.content() and secret[:11] in page.text_content("[data-testid=key-item]")
            page.click("button[aria-label='Revoke phone']")
            page.wait_for_load_state()
            assert "revoked" in page.text_content("[data-testid=key-item]")
            with pytest.raises(openai.AuthenticationError):
                client.models.list()
        finally:
            browser.close()
