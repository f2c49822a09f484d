"""End to end: Daphne, the worker and the embedded Redis as processes (the run command's code path)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from channels.db import database_sync_to_async as sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client

from chatapp.models import Generation
from tests.chatapp.helpers import stream_text

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
TIMEOUT = 120.0  # a guard against hanging, not a speed assertion


@sync_to_async
def _login(username: str) -> str:
    user = get_user_model().objects.create_user(username=username, password="pw-123456")
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def _chat(stack, cookie: str, content: str) -> tuple[dict, list[dict]]:
    """Connects, sends one message, returns (hello, every event up to its `done`)."""
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(stack.ws_url, origin=stack.url, additional_headers=headers) as ws:
        hello = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        frame = {"type": "send", "conversation_id": None, "content": content, "params": {"max_tokens": 40}}
        await ws.send(json.dumps(frame))
        events = []
        while not events or events[-1]["type"] != "done":
            events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
        return hello, events


async def test_two_clients_chat_through_daphne_worker_and_redis(chat_stack_live):
    chat_stack = chat_stack_live
    health = httpx.get(f"{chat_stack.url}/health", timeout=30).json()
    assert health["ok"] and health["redis"]["ok"] and len(health["workers"]) == 1
    cookie_a, cookie_b = await _login("e2e-alice"), await _login("e2e-bob")
    (hello_a, events_a), (hello_b, events_b) = await asyncio.gather(
        _chat(chat_stack, cookie_a, "Hello from Alice"), _chat(chat_stack, cookie_b, "Hello from Bob")
    )
    assert hello_a["user"]["username"] == "e2e-alice" and hello_b["user"]["username"] == "e2e-bob"
    assert hello_a["model"]["is_demo"] is True and hello_a["model"]["max_context"] == 2048
    ids = set()
    for events in (events_a, events_b):
        generation_id = events[-1]["generation"]["id"]
        ids.add(generation_id)
        row = await sync_to_async(Generation.objects.get)(id=generation_id)
        assert row.state == "done"
        assert stream_text(events, generation_id) == row.text == events[-1]["generation"]["text"]
    assert len(ids) == 2
    seen_by_a = {e.get("generation_id") for e in events_a} | {
        e.get("generation", {}).get("id") for e in events_a
    }
    assert not (ids - {events_a[-1]["generation"]["id"]}) & seen_by_a  # alice saw nothing of bob's answer


async def test_foreign_origin_is_refused(chat_stack_live):
    chat_stack = chat_stack_live
    cookie = await _login("e2e-carol")
    headers = {"Cookie": f"sessionid={cookie}"}
    async with websockets.connect(
        chat_stack.ws_url, origin="http://evil.example", additional_headers=headers
    ) as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
    assert closed.value.rcvd.code == 4403
