"""A page object for the chat page: what a person does (type, press Enter, click Stop) and what they see.

It also records every frame the page's sockets receive, so tests can check what streamed to which browser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Page, expect

WAIT_MS = 60_000  # a step that should happen soon (a page load, an answer starting)
ANSWER_MS = 240_000  # a whole long answer on a busy two-core machine

# Greedy (temperature 0) answers of the demo model are fixed per prompt; this one runs to max_tokens without an
# end-of-sequence token, so an answer stays in flight long enough to stop, reload or drop the socket mid-way.
LONG_PROMPT = "Count to one thousand"
LONG_SETTINGS = {"temperature": "0", "max_tokens": "1900"}


class ChatPage:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.frames: list[dict] = []
        self.errors: list[str] = []
        page.set_default_timeout(WAIT_MS)
        page.on("websocket", self._watch_socket)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("dialog", lambda dialog: dialog.accept())

    def _watch_socket(self, ws) -> None:
        def received(payload) -> None:
            self.frames.append(json.loads(payload))

        ws.on("framereceived", received)

    # --- navigation ---------------------------------------------------------------------------------------------
    def goto(self, path: str = "/") -> None:
        self.page.goto(path)
        self.wait_connected()

    def reload(self) -> None:
        self.page.reload()
        self.wait_connected()

    def wait_connected(self) -> None:
        self.page.wait_for_function("() => window.chatApp && window.chatApp.socket.isOpen")
        expect(self.page.locator("#send")).to_be_enabled()

    @property
    def conversation_id(self) -> str | None:
        match = re.search(r"/c/([0-9a-f-]{36})$", self.page.url)
        return match.group(1) if match else None

    def boot_user(self) -> dict:
        return self.page.evaluate("() => JSON.parse(document.getElementById('boot').textContent).user")

    # --- actions ------------------------------------------------------------------------------------------------
    def set_settings(self, **fields: str) -> None:
        """Opens the settings panel, fills fields (temperature, top_p, max_tokens, system_prompt) and saves."""
        ids = {
            "temperature": "#set-temperature",
            "top_p": "#set-top-p",
            "max_tokens": "#set-max-tokens",
            "system_prompt": "#set-system",
        }
        self.page.click("#settings-toggle")
        for name, value in fields.items():
            self.page.fill(ids[name], value)
        self.page.click("#settings-panel button[type=submit]")
        expect(self.page.locator("#settings-note")).to_contain_text("Saved")
        self.page.click("#settings-cancel")

    def send(self, text: str) -> None:
        """Types into the message box and presses Enter, as a person would."""
        box = self.page.locator("#prompt")
        box.fill(text)
        box.press("Enter")
        expect(self.page.locator(".msg-user .msg-body").last).to_have_text(text)

    def start_long_answer(self) -> None:
        self.set_settings(**LONG_SETTINGS)
        self.send(LONG_PROMPT)
        self.wait_answer_text()

    # --- what is on screen --------------------------------------------------------------------------------------
    @property
    def last_answer(self):
        return self.page.locator(".msg-assistant").last

    def wait_answer_text(self) -> None:
        """Waits until the last answer shows some streamed text."""
        self.page.wait_for_function(
            "() => { const v = window.chatApp.thread.views.at(-1);"
            " return v && v.role === 'assistant' && v.text.length > 0; }"
        )

    def wait_answer_final(self, states: str = "done|stopped|failed") -> str:
        expect(self.last_answer).to_have_attribute(
            "data-state", re.compile(f"^({states})$"), timeout=ANSWER_MS
        )
        return self.last_answer.get_attribute("data-state")

    def answer_state(self) -> dict:
        """The last answer as the page holds it: generation id, text, seq and state."""
        return self.page.evaluate(
            "() => { const v = window.chatApp.thread.views.at(-1);"
            " return {id: v.generationId, text: v.text, seq: v.seq, state: v.state}; }"
        )

    def sidebar_titles(self) -> list[str]:
        return self.page.locator(".conversation-link").all_inner_texts()

    def frames_of(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f.get("type") == kind]

    def horizontal_overflow(self) -> int:
        """How many pixels the page is wider than the viewport (0 when nothing scrolls sideways)."""
        return self.page.evaluate(
            "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth"
        )

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))
