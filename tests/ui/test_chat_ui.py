"""The chat page in a real chromium against the real stack (Daphne, inference worker on the demo model, Redis).

What a person does and sees: answers stream in, several people at once each see only their own, Stop keeps the
partial answer, reloading or losing the connection mid-answer loses nothing, model output never runs as code, and
the page fits a phone. Screenshots land in tests/artifacts/ (the desktop one also in docs/screenshot.png
when UPDATE_SCREENSHOT=1, as `make screenshot` sets).
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from tests.ui.chat_page import LONG_SETTINGS
from tests.ui.conftest import DOCS, PHONE

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

# The ORM refuses to run in a thread where an event loop runs (Playwright's sync API keeps one), so the tests
# read and write rows from a worker thread.
_db_thread = ThreadPoolExecutor(max_workers=1)


def in_db_thread(fn, *args, **kwargs):
    def call():
        from django.db import connection

        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return _db_thread.submit(call).result()


def generation_row(generation_id: str) -> dict:
    """The answer's row as the worker left it: state, text, completion_tokens and its conversation's title."""
    from chatapp.models import Generation

    def read() -> dict:
        row = Generation.objects.select_related("conversation").get(id=generation_id)
        return {
            "state": row.state,
            "text": row.text,
            "completion_tokens": row.completion_tokens,
            "title": row.conversation.title,
        }

    return in_db_thread(read)


def test_two_users_each_see_only_their_own_answer_stream(open_chat, long_prompts, artifacts):
    alice, bob = open_chat(), open_chat()
    assert alice.boot_user()["username"] != bob.boot_user()["username"]
    for page in (alice, bob):
        page.set_settings(**LONG_SETTINGS)
    alice.send(long_prompts[0])
    bob.send(long_prompts[1])  # both answers are long, so they stream at the same time
    alice.wait_answer_text()
    bob.wait_answer_text()
    # Mark the nodes on screen: streaming must update the answer in place, never rebuild the thread.
    alice.page.evaluate(
        "() => document.querySelectorAll('#messages > *').forEach((n) => { n.__kept = true; })"
    )
    alice.wait_answer_final()
    bob.wait_answer_final()

    answers = {}
    for name, page in (("alice", alice), ("bob", bob)):
        answer = page.answer_state()
        answers[name] = answer
        own_ids = {f["generation"]["id"] for f in page.frames_of("generation")}
        assert own_ids == {answer["id"]}
        deltas = page.frames_of("delta")
        assert len(deltas) >= 2, f"{name}'s answer did not stream"
        assert {d["generation_id"] for d in deltas} == {answer["id"]}
        row = generation_row(answer["id"])
        assert row["text"] == answer["text"] and row["text"]
        expect(page.page.locator(".conversation-link")).to_have_text([row["title"]])
        assert page.errors == []
    assert answers["alice"]["id"] != answers["bob"]["id"]
    assert alice.page.evaluate("() => [...document.querySelectorAll('#messages > *')].every((n) => n.__kept)")
    for page, other in ((alice, answers["bob"]), (bob, answers["alice"])):
        assert all(f.get("generation_id") != other["id"] for f in page.frames)
        assert page.page.locator(f"[data-generation-id='{other['id']}']").count() == 0
    expect(alice.last_answer.locator(".stats")).to_contain_text("tokens/s")
    expect(alice.last_answer.locator(".stats")).to_contain_text("TTFT")
    alice.screenshot(artifacts / "two-users-alice.png")
    bob.screenshot(artifacts / "two-users-bob.png")


def test_stop_keeps_the_partial_answer_marked_stopped(open_chat, long_prompts, artifacts):
    chat = open_chat()
    chat.start_long_answer(long_prompts[0])
    expect(chat.page.locator("#stop")).to_be_visible()
    chat.page.click("#stop")
    assert chat.wait_answer_final() == "stopped"
    expect(chat.last_answer.locator(".badge")).to_have_text("Stopped")
    expect(chat.page.locator("#send")).to_be_visible()
    answer = chat.answer_state()
    row = generation_row(answer["id"])
    assert row["state"] == "stopped"
    assert row["text"] == answer["text"] and 0 < row["completion_tokens"] < int(LONG_SETTINGS["max_tokens"])
    chat.screenshot(artifacts / "stopped.png")

    chat.reload()  # kept: the reloaded page shows the same stopped answer
    expect(chat.last_answer).to_have_attribute("data-state", "stopped")
    assert chat.answer_state()["text"] == row["text"]


def test_reload_mid_answer_shows_the_text_so_far_and_keeps_streaming(open_chat, long_prompts):
    chat = open_chat()
    chat.start_long_answer(long_prompts[0])
    url = chat.page.url
    assert chat.conversation_id is not None
    chat.frames.clear()
    chat.reload()
    assert chat.page.url == url
    shown = chat.answer_state()  # straight after the reloaded page loaded the conversation
    assert shown["state"] in ("queued", "running"), f"the answer ended before the reload: {shown}"
    assert shown["text"] != "" and shown["seq"] > 0
    chat.wait_answer_final()
    assert chat.frames_of("delta"), "nothing streamed after the reload"
    final = chat.answer_state()
    row = generation_row(final["id"])
    assert row["state"] == "done" and final["text"] == row["text"]
    assert final["text"].startswith(shown["text"])


def test_two_tabs_and_a_dropped_socket_both_stream_to_the_end(open_chat, long_prompts):
    first = open_chat()
    first.start_long_answer(long_prompts[1])
    second = open_chat(context=first.page.context, path=f"/c/{first.conversation_id}")
    second.wait_answer_text()
    first.frames.clear()
    first.page.evaluate("() => window.chatApp.socket.drop()")  # as a network failure would
    first.wait_connected()  # reconnected by itself
    first.wait_answer_final()
    second.wait_answer_final()
    row = generation_row(first.answer_state()["id"])
    assert row["state"] == "done"
    assert first.answer_state()["text"] == row["text"] == second.answer_state()["text"]
    assert first.frames_of("history"), "the reconnected socket did not reload the conversation"
    assert second.frames_of("delta"), "the second tab did not stream"

    assert first.errors == [] and second.errors == []


def test_a_message_from_one_tab_streams_in_every_tab_on_that_conversation(open_chat):
    first = open_chat()
    first.set_settings(max_tokens="64")
    first.send("hello from the first tab")
    first.wait_answer_final()
    second = open_chat(context=first.page.context, path=f"/c/{first.conversation_id}")
    second.send("and a follow-up from the second tab")
    first.wait_answer_to("and a follow-up from the second tab")
    second.wait_answer_final()
    first.wait_answer_final()
    assert first.answer_state() == second.answer_state()
    assert first.frames_of("delta") and second.frames_of("delta")
    assert first.errors == [] and second.errors == []


def test_someone_elses_conversation_url_shows_not_found_in_place(open_chat):
    owner = open_chat()
    owner.send("private")
    owner.wait_answer_final()
    stranger = open_chat(path=f"/c/{owner.conversation_id}")
    expect(stranger.page.locator(".thread-error")).to_contain_text("does not exist")
    expect(stranger.page.locator(".msg-user")).to_have_count(0)
    assert stranger.conversation_id is None  # back on a new chat


EVIL = (
    "Here is <b>bold?</b> and <script>window.__pwned = 'script'</script>\n\n"
    '<img src="x" onerror="window.__pwned = \'img\'">\n\n'
    "[click](javascript:window.__pwned='link') and `inline <i>code</i>`\n\n"
    "```html\n<script>alert(1)</script>\n```\n"
)


def _finished_answer(username: str, text: str) -> str:
    """A conversation whose answer (with HTML in it) is already finished, written as the worker would."""
    from django.contrib.auth import get_user_model

    from chatapp.models import Conversation, Generation, Message

    user = get_user_model().objects.get(username=username)
    conversation = Conversation.objects.create(user=user, title="HTML in an answer")
    Message.objects.create(conversation=conversation, role="user", content="Show me some HTML")
    generation = Generation.objects.create(
        user=user,
        conversation=conversation,
        state=Generation.State.DONE,
        prompt={"messages": [{"role": "user", "content": "Show me some HTML"}]},
        text=text,
        seq=1,
        prompt_tokens=5,
        completion_tokens=40,
        ttft_ms=120.0,
        tokens_per_s=50.0,
        finish_reason="stop",
    )
    Message.objects.create(conversation=conversation, role="assistant", content=text, generation=generation)
    return str(conversation.id)


def test_html_and_scripts_from_messages_and_answers_show_as_text(open_chat, artifacts):
    chat = open_chat()
    conversation_id = in_db_thread(_finished_answer, chat.boot_user()["username"], EVIL)
    chat.goto(f"/c/{conversation_id}")
    answer = chat.last_answer.locator(".msg-body")
    expect(answer).to_contain_text("<script>window.__pwned = 'script'</script>")
    expect(answer).to_contain_text('<img src="x" onerror=')
    expect(answer.locator("b")).to_have_count(0)
    expect(answer.locator("pre code")).to_have_text("<script>alert(1)</script>")
    chat.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    chat.last_answer.locator(".copy-code").click()
    expect(chat.last_answer.locator(".copy-code")).to_have_text("Copied")
    assert chat.page.evaluate("() => navigator.clipboard.readText()") == "<script>alert(1)</script>"
    expect(answer.locator("a")).to_have_count(1)
    assert (answer.locator("a").get_attribute("href") or "").startswith("javascript:") is False

    user_text = (
        "My <b>own</b> <script>window.__pwned = 'user'</script> <img src=x onerror=\"window.__pwned='u'\">"
    )
    chat.send(user_text)  # a user message with HTML is shown as typed
    expect(chat.page.locator(".msg-user .msg-body").last).to_have_text(user_text)
    chat.wait_answer_final()

    thread = chat.page.locator("#messages")
    expect(thread.locator("script, img, iframe, [onerror]")).to_have_count(0)
    assert chat.page.evaluate("() => window.__pwned") is None
    assert chat.errors == []
    chat.screenshot(artifacts / "html-as-text.png")


def test_conversations_new_rename_delete_and_the_url_survives_reload(open_chat):
    chat = open_chat()
    site = chat.page.url.rstrip("/")
    chat.send("first conversation")
    chat.wait_answer_final()
    first_id = chat.conversation_id
    chat.page.click("#new-chat")
    expect(chat.page.locator("#welcome")).to_be_visible()
    chat.send("second conversation")
    chat.wait_answer_final()
    titles = chat.page.locator(".conversation-link")
    expect(titles).to_have_text(["second conversation", "first conversation"])  # most recent first

    item = chat.page.locator(f"[data-conversation-id='{first_id}']")
    item.locator("[data-role=rename]").click()
    title = chat.page.locator("[data-role=title]")
    title.fill("Renamed by keyboard")
    title.press("Enter")
    expect(item.locator(".conversation-link")).to_have_text("Renamed by keyboard")

    item.locator(".conversation-link").click()
    expect(chat.page).to_have_url(f"{site}/c/{first_id}")
    chat.reload()
    expect(chat.page.locator("#chat-title")).to_have_text("Renamed by keyboard")
    expect(chat.page.locator(".msg-user .msg-body")).to_have_text(["first conversation"])

    item.locator("[data-role=delete]").click()  # the confirm dialog is accepted by the page object
    expect(chat.page.locator(".conversation-link")).to_have_text(["second conversation"])
    expect(chat.page).to_have_url(f"{site}/")
    chat.reload()
    expect(chat.page.locator(".conversation-link")).to_have_text(["second conversation"])


def test_phone_width_layout_has_no_sideways_scrolling(open_chat, artifacts):
    chat = open_chat(viewport=PHONE)
    chat.send("A very long word: " + "supercalifragilistic" * 8 + "\n\n```\n" + "x = 1; " * 40 + "\n```")
    chat.wait_answer_final()
    assert chat.horizontal_overflow() <= 0
    expect(chat.page.locator("#sidebar")).not_to_be_visible()
    chat.screenshot(artifacts / "phone-chat.png")
    chat.page.click("#menu-toggle")
    expect(chat.page.locator("#sidebar")).to_be_visible()
    expect(chat.page.locator(".conversation-link")).to_have_count(1)
    assert chat.horizontal_overflow() <= 0
    chat.screenshot(artifacts / "phone-drawer.png")
    chat.page.keyboard.press("Escape")
    expect(chat.page.locator("#sidebar")).not_to_be_visible()
    assert chat.errors == []


SHOWCASE = """Continuous batching keeps every user's decode step in **one forward pass**:

1. the scheduler picks the running sequences (decodes first, then prefill chunks);
2. the model runner reads each weight once for the whole batch;
3. each user receives only their own tokens.

```python
for output in engine.step():
    send(output.request_id, output.delta)
```
"""


def _showcase(username: str) -> None:
    """Two earlier conversations, so the screenshot shows a realistic list and a rendered markdown answer."""
    from django.contrib.auth import get_user_model

    from chatapp.models import Conversation, Generation, Message

    user = get_user_model().objects.get(username=username)
    earlier = [
        (
            "Weekend trip ideas",
            "Any ideas for a weekend trip?",
            "A lake, a hike, or a city you have never seen.",
        ),
        ("Explain continuous batching", "How does continuous batching work?", SHOWCASE),
    ]
    for title, question, answer in earlier:
        conversation = Conversation.objects.create(user=user, title=title)
        Message.objects.create(conversation=conversation, role="user", content=question)
        generation = Generation.objects.create(
            user=user,
            conversation=conversation,
            state=Generation.State.DONE,
            prompt={"messages": [{"role": "user", "content": question}]},
            text=answer,
            seq=1,
            prompt_tokens=12,
            completion_tokens=86,
            ttft_ms=84.0,
            tokens_per_s=41.5,
            finish_reason="stop",
        )
        Message.objects.create(
            conversation=conversation, role="assistant", content=answer, generation=generation
        )


def test_desktop_screenshot_for_the_readme(open_chat, artifacts):
    chat = open_chat()
    in_db_thread(_showcase, chat.boot_user()["username"])
    chat.reload()
    chat.page.locator(".conversation-link", has_text="Explain continuous batching").click()
    expect(chat.last_answer.locator("pre code")).to_contain_text("engine.step()")
    chat.set_settings(max_tokens="48")  # a short live answer, so the rendered markdown stays in view
    chat.send("And what does the demo model say?")
    chat.wait_answer_final()
    expect(chat.page.locator("#demo-banner")).to_be_visible()
    chat.page.locator("#prompt").focus()
    assert chat.errors == []
    chat.screenshot(artifacts / "desktop-chat.png")
    if os.environ.get("UPDATE_SCREENSHOT") == "1":  # `make screenshot`: refresh the README's picture
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(artifacts / "desktop-chat.png", DOCS / "screenshot.png")


def test_settings_newlines_regenerate_and_refusals_shown_in_place(open_chat):
    chat = open_chat()
    box = chat.page.locator("#prompt")
    box.fill("line one")
    box.press("Shift+Enter")  # a new line, not a send
    box.press_sequentially("line two")
    expect(chat.page.locator(".msg-user")).to_have_count(0)
    box.press("Enter")
    expect(chat.page.locator(".msg-user .msg-body")).to_have_text(["line one\nline two"])
    chat.wait_answer_final()
    first = chat.answer_state()["id"]

    chat.last_answer.get_by_role("button", name="Regenerate").click()
    chat.page.wait_for_function(
        "(old) => { const v = window.chatApp.thread.views.at(-1); return v.generationId && v.generationId !== old; }",
        arg=first,
    )
    chat.wait_answer_final()
    expect(chat.page.locator(".msg-assistant")).to_have_count(1)  # the new answer replaced the old one

    chat.set_settings(system_prompt="Answer briefly.", temperature="0.5", top_p="0.9", max_tokens="64")
    chat.reload()
    chat.page.click("#settings-toggle")
    expect(chat.page.locator("#set-system")).to_have_value("Answer briefly.")
    expect(chat.page.locator("#set-temperature")).to_have_value("0.5")
    expect(chat.page.locator("#set-top-p")).to_have_value("0.9")
    expect(chat.page.locator("#set-max-tokens")).to_have_value("64")
    chat.page.fill("#set-temperature", "5")
    chat.page.click("#settings-panel button[type=submit]")
    expect(chat.page.locator("#settings-note")).to_contain_text("Temperature must be")
    chat.page.fill("#set-temperature", "0.5")
    chat.page.fill("#set-max-tokens", "2000")
    chat.page.click("#settings-panel button[type=submit]")
    expect(chat.page.locator("#settings-note")).to_have_text("Saved.")
    chat.page.click("#settings-cancel")

    long_message = " ".join(
        f"word{i}" for i in range(200)
    )  # with max_tokens 2000 this cannot fit the context
    box.fill(long_message)
    box.press("Enter")
    refusal = chat.page.locator(".thread-error")
    expect(refusal).to_contain_text("Not sent")
    expect(refusal).to_contain_text("context")
    expect(box).to_have_value(long_message)  # given back to edit
    expect(chat.page.locator(".msg-user")).to_have_count(1)


def test_every_control_is_reachable_with_the_keyboard(open_chat):
    chat = open_chat()
    chat.send("hello")
    chat.wait_answer_final()
    reached = []
    for _ in range(20):
        chat.page.keyboard.press("Tab")
        reached.append(
            chat.page.evaluate(
                "() => { const e = document.activeElement;"
                " return e.id || e.getAttribute('aria-label') || e.textContent.trim(); }"
            )
        )
    expected = [
        "new-chat",
        "hello",
        "Rename “hello”",
        "Delete “hello”",
        "Sign up",
        "Log in",
        "settings-toggle",
    ]
    expected += ["Copy", "Regenerate", "prompt", "send"]
    cycle = reached[reached.index("Skip to message box") :]  # one round of Tab presses from the page's top
    positions = [cycle.index(control) if control in cycle else -1 for control in expected]
    assert -1 not in positions and positions == sorted(positions), f"Tab order {cycle} lacks {expected}"


def test_a_guest_signs_up_and_keeps_the_chat(open_chat, artifacts):
    chat = open_chat()
    chat.send("remember me")
    chat.wait_answer_final()
    chat.page.get_by_role("link", name="Sign up").click()
    chat.page.fill("#id_username", "erin")
    chat.page.fill("#id_password1", "a-long-Secret-42")
    chat.page.fill("#id_password2", "a-long-Secret-42")
    chat.screenshot(artifacts / "signup.png")
    chat.page.get_by_role("button", name="Sign up").click()
    chat.wait_connected()
    expect(chat.page.locator(".account-name")).to_contain_text("erin")
    expect(chat.page.locator(".conversation-link")).to_have_text(["remember me"])
    hello = chat.frames_of("hello")[-1]["user"]  # the socket now belongs to the account
    assert hello["username"] == "erin" and hello["is_guest"] is False
    chat.page.get_by_role("button", name="Log out").click()
    chat.wait_connected()
    expect(chat.page.locator(".pill")).to_have_text("Guest")
    expect(chat.page.locator("#conversation-empty")).to_be_visible()
