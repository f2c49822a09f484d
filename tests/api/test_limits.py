"""429s: a key over its concurrency limit, and a full queue. Requests go through Django's real request path in this
process while the stack's live worker (sharing the test database) claims and runs what is queued."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from chatapp import services
from chatapp.api import config
from chatapp.models import Generation

pytestmark = [pytest.mark.e2e]


@pytest.fixture(autouse=True)
def same_model_as_the_stack(chat_stack, settings):
    """This process queues for the model the stack's worker serves (as the stack's Daphne does)."""
    settings.LLM_MODEL = chat_stack.env["LLM_MODEL"]


def post(api, body: dict):
    return AsyncClient().post(
        "/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.key}"},
    )


async def test_a_key_over_its_concurrency_limit_gets_429_with_retry_after(api, monkeypatch, settings):
    monkeypatch.setattr(config, "API_MAX_CONCURRENT_PER_KEY", 2)
    # the chat's per-user limits are not the API's: a key has its own
    settings.CHAT_MAX_CONCURRENT_PER_USER = 1
    settings.CHAT_RATE_PER_MINUTE = 1
    long = {
        "model": api.model,
        "messages": [{"role": "user", "content": "Go on."}],
        "max_tokens": 1800,
        "ignore_eos": True,
        "stream": True,
    }
    for _ in range(2):
        assert (await post(api, long)).status_code == 200  # streams we do not read: they keep running
    response = await post(api, long)
    assert response.status_code == 429 and response["Retry-After"].isdigit()
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "limit is 2" in error["message"]
    rows = [row async for row in Generation.objects.filter(api_key__user=api.user)]
    assert len(rows) == 2  # the refused request queued nothing
    for row in rows:
        await sync_to_async(services.generation_cancel)(user=api.user, generation_id=row.id)


async def test_a_full_queue_gets_429(api, settings):
    settings.CHAT_QUEUE_MAX = 0
    body = {"model": api.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    response = await post(api, body)
    assert response.status_code == 429 and response["Retry-After"].isdigit()
    assert "queue is full" in response.json()["error"]["message"]
    assert not await Generation.objects.aexists()
