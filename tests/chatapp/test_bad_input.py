"""Every malformed or invalid frame gets a clear error event; the socket carries on and nothing is queued."""

from __future__ import annotations

import json
import uuid

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator

from chatapp.models import Conversation, Generation, Message

MAX_CHARS = 50  # CHAT_MAX_MESSAGE_CHARS for these tests
NEW = {"type": "send", "conversation_id": None, "content": "hi"}


def _send(**changes):
    return json.dumps({**NEW, **changes})


def _send_params(**params):
    return _send(params=params)


CASES = [
    ("not json", "bad_json", None),
    ("[1, 2]", "bad_json", None),
    ('"a string"', "bad_json", None),
    ("[" * 2500 + "]" * 2500, "bad_json", None),  # nesting past the parser's recursion limit
    ("{}", "bad_type", None),
    ('{"type": "nope"}', "bad_type", None),
    ('{"type": 5}', "bad_type", None),
    (_send(request_id=5), "bad_field", "request_id"),
    (_send(request_id="x" * 65), "bad_field", "request_id"),
    (json.dumps({"type": "send", "conversation_id": None}), "bad_field", "content"),
    (json.dumps({"type": "send", "content": "hi"}), "bad_field", "conversation_id"),
    (_send(content=5), "bad_field", "content"),
    (_send(content="a\x00b"), "bad_field", None),  # PostgreSQL text cannot hold U+0000
    (_send(system_prompt="\x00"), "bad_field", None),
    (_send(content=""), "bad_field", "content"),
    (_send(content=" \n\t "), "bad_field", "content"),
    (_send(content="x" * (MAX_CHARS + 1)), "too_long", "content"),
    (_send(conversation_id="not-a-uuid"), "bad_field", "conversation_id"),
    (_send(conversation_id=123), "bad_field", "conversation_id"),
    (_send(system_prompt=5), "bad_field", "system_prompt"),
    (_send(system_prompt="s" * 201), "too_long", "system_prompt"),
    (_send(params="hot"), "bad_field", "params"),
    (_send(params={"seed": 1}), "bad_field", "params.seed"),
    (_send_params(temperature=-0.1), "bad_field", "params.temperature"),
    (_send_params(temperature=2.5), "bad_field", "params.temperature"),
    (_send_params(temperature="hot"), "bad_field", "params.temperature"),
    (_send_params(temperature=True), "bad_field", "params.temperature"),
    ('{"type": "send", "conversation_id": null, "content": "hi", "params": {"temperature": NaN}}', "bad_field",
     "params.temperature"),
    (_send_params(top_p=0), "bad_field", "params.top_p"),
    (_send_params(top_p=1.5), "bad_field", "params.top_p"),
    (_send_params(max_tokens=0), "bad_field", "params.max_tokens"),
    (_send_params(max_tokens=1.5), "bad_field", "params.max_tokens"),
    (_send_params(max_tokens="10"), "bad_field", "params.max_tokens"),
    (_send_params(max_tokens=True), "bad_field", "params.max_tokens"),
    (_send_params(max_tokens=10**9), "bad_field", "params.max_tokens"),
    (_send(content="word " * 9, params={"max_tokens": 2047}), "context", None),
    ('{"type": "load"}', "bad_field", "conversation_id"),
    ('{"type": "load", "conversation_id": null}', "bad_field", "conversation_id"),
    (json.dumps({"type": "rename", "conversation_id": str(uuid.uuid4()), "title": ""}), "bad_field", "title"),
    (json.dumps({"type": "rename", "conversation_id": str(uuid.uuid4()), "title": 7}), "bad_field", "title"),
    (json.dumps({"type": "rename", "conversation_id": str(uuid.uuid4()), "title": "t" * 201}), "too_long",
     "title"),
    ('{"type": "cancel"}', "bad_field", "generation_id"),
    (json.dumps({"type": "resume", "generation_id": str(uuid.uuid4())}), "bad_field", "after_seq"),
    (json.dumps({"type": "resume", "generation_id": str(uuid.uuid4()), "after_seq": -1}), "bad_field",
     "after_seq"),
    (json.dumps({"type": "resume", "generation_id": str(uuid.uuid4()), "after_seq": "3"}), "bad_field",
     "after_seq"),
    (json.dumps({"type": "regenerate", "conversation_id": str(uuid.uuid4())}), "not_found", "conversation_id"),
    ("x" * 6000, "too_long", None),  # past the frame bound for these limits, refused before parsing
]  # fmt: skip


@pytest.fixture
def small_limits(chat_env):
    chat_env.CHAT_MAX_MESSAGE_CHARS = MAX_CHARS
    chat_env.CHAT_MAX_SYSTEM_PROMPT_CHARS = 200
    return chat_env


@sync_to_async
def _rows() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Generation.objects.count()


async def test_bad_frames_get_error_events_and_change_nothing(small_limits, make_user, open_socket):
    user = await make_user()
    chat = await open_socket(user)
    bystander = await open_socket(await make_user())
    for text, code, field in CASES:
        await chat.send_raw(text)
        event = await chat.recv()
        assert event["type"] == "error", (text[:80], event)
        assert (event["code"], event.get("field")) == (code, field), (text[:80], event)
        assert event["message"]
    await chat.communicator.send_to(bytes_data=b"\x00\x01")
    assert (await chat.recv())["code"] == "bad_json"
    assert await _rows() == (0, 0, 0)  # nothing written, nothing queued
    # The socket and everyone else carry on.
    assert (await chat.request(type="list"))["type"] == "conversations"
    assert (await bystander.request(type="list"))["type"] == "conversations"
    ok = await chat.request(type="send", conversation_id=None, content="fine")
    assert ok["type"] == "conversation"


async def test_error_echoes_a_valid_request_id(small_limits, make_user, open_socket):
    chat = await open_socket(await make_user())
    await chat.send(type="nope", request_id="abc")
    event = await chat.recv()
    assert (event["type"], event["code"], event["request_id"]) == ("error", "bad_type", "abc")


@pytest.mark.parametrize(
    ("limit", "value"),
    [("CHAT_MAX_CONCURRENT_PER_USER", 1), ("CHAT_RATE_PER_MINUTE", 1), ("CHAT_QUEUE_MAX", 1)],
)
async def test_limits_answer_busy_with_retry_after(chat_env, make_user, open_socket, limit, value):
    setattr(chat_env, limit, value)
    chat = await open_socket(await make_user())
    first = await chat.request(type="send", conversation_id=None, content="one")
    assert first["type"] == "conversation"
    await chat.recv_until(lambda e: e["type"] == "error" and e["code"] == "no_worker")  # still queued
    before = await _rows()
    other_user = await open_socket(await make_user())
    sockets = [other_user] if limit == "CHAT_QUEUE_MAX" else [chat]
    for sock in sockets:
        busy = await sock.request(type="send", conversation_id=None, content="two")
        assert busy["type"] == "error" and busy["code"] == "busy", busy
        assert busy["retry_after"] >= 1
    assert await _rows() == before


async def test_foreign_origin_and_anonymous_sockets_are_closed(chat_env, make_user):
    from chatapp.asgi import application

    for headers, code in (
        ([(b"host", b"testserver"), (b"origin", b"http://evil.example")], 4403),
        ([(b"host", b"testserver"), (b"origin", b"http://testserver:9999")], 4403),
        ([(b"host", b"testserver")], 4403),
        ([(b"host", b"testserver"), (b"origin", b"http://testserver")], 4401),  # no session: no user
    ):
        communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        assert await communicator.receive_output() == {"type": "websocket.close", "code": code}
        await communicator.wait()
