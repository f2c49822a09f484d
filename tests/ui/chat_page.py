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

# Greedy (temperature 0) answers of the demo model are fixed per prompt. Prompts whose answer runs to max_tokens
# without an end-of-sequence token keep an answer in flight long enough to stop, reload or drop the socket mid-way;
# which prompts do depends on the demo model's random weights, so the tests probe for them (find_long_prompts).
LONG_SETTINGS = {"temperature": "0", "max_tokens": "2000"}
CANDIDATE_PROMPTS = [f"Please count to {n} slowly" for n in range(100, 4100, 100)]

_PROBE_JS = """
async ({prompts, want, maxTokens}) => {
  const ws = new WebSocket(`ws://${location.host}/ws/chat/`);
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  const found = [];
  for (const content of prompts) {
    const end = new Promise((resolve) => {
      ws.onmessage = (event) => {
        const frame = JSON.parse(event.data);
        if (frame.type === "done" || frame.type === "error") resolve(frame);
      };
    });
    const params = {temperature: 0, max_tokens: maxTokens};
    ws.send(JSON.stringify({type: "send", conversation_id: null, content, params}));
    const frame = await end;
    if (frame.type === "done" && frame.generation.finish_reason === "length") found.push(content);
    if (found.length === want) break;
  }
  ws.close();
  return found;
}
"""


class ChatPage:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.frames: list[dict] = []
        self.errors: list[str] = []
        page.set_default_timeout(WAIT_MS)
        page.on("websocket", self._watch_socket)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", self._watch_console)
        page.on("dialog", lambda dialog: dialog.accept())

    def _watch_console(self, message) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            self.errors.append(message.text)

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
        """Waits until the socket is open and the open conversation (if any) is loaded from the server."""
        self.page.wait_for_function(
            "() => window.chatApp && window.chatApp.socket.isOpen && !window.chatApp.loading"
        )
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
        """Types into the message box and presses Enter, as a person would; returns once the answer is shown."""
        box = self.page.locator("#prompt")
        box.fill(text)
        box.press("Enter")
        self.wait_answer_to(text)

    def wait_answer_to(self, text: str) -> None:
        """Waits until the user message `text` is the last one shown and its answer's bubble follows it."""
        expect(self.page.locator(".msg-user .msg-body").last).to_have_text(text)
        self.page.wait_for_function("() => window.chatApp.thread.views.at(-1)?.role === 'assistant'")

    def find_long_prompts(self, want: int) -> list[str]:
        """Prompts whose greedy answer runs to LONG_SETTINGS' max_tokens (sent from this page's own socket)."""
        return self.page.evaluate(
            _PROBE_JS,
            {"prompts": CANDIDATE_PROMPTS, "want": want, "maxTokens": int(LONG_SETTINGS["max_tokens"])},
        )

    def start_long_answer(self, prompt: str) -> None:
        self.set_settings(**LONG_SETTINGS)
        self.send(prompt)
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

    def frames_of(self, kind: str) -> list[dict]:
        return [f for f in self.frames if f.get("type") == kind]

    def horizontal_overflow(self) -> int:
        """How many pixels the page is wider than the viewport (0 when nothing scrolls sideways)."""
        return self.page.evaluate(
            "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth"
        )

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))
