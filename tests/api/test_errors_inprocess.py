"""Errors answered before anything is queued, through Django's real request path (no worker needed).

The statuses that need a running worker (429, and the happy paths) are in test_e2e.py against Daphne.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import AsyncClient

from chatapp.api import config
from chatapp.api.keys import api_key_create, api_key_revoke
from chatapp.models import ApiKey, Generation

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = {"model": "demo-model", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def user():
    return get_user_model().objects.create_user(username="alice", password="pw-alice-123")


@pytest.fixture
def key(user) -> str:
    return api_key_create(user=user, name="test")[1]


def post(client: AsyncClient, path: str, body, key: str | None, **extra):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", headers=headers, **extra)


def error_of(response) -> dict:
    assert response["Content-Type"].startswith("application/json")
    return response.json()["error"]


async def test_missing_wrong_and_revoked_keys_are_401(user, key):
    client = AsyncClient()
    for token in (None, "sk-nope", key + "x", "Basic abc"):
        response = await post(client, "/v1/chat/completions", CHAT, token)
        assert response.status_code == 401
        assert error_of(response)["code"] == "invalid_api_key"
    response = await client.get("/v1/models", headers={"Authorization": f"Bearer {key[:-1]}"})
    assert response.status_code == 401
    row = await ApiKey.objects.aget(user=user)
    await _sync(api_key_revoke, user=user, key_id=row.id)
    response = await post(client, "/v1/chat/completions", CHAT, key)
    assert response.status_code == 401


async def _sync(fn, **kwargs):
    from asgiref.sync import sync_to_async

    return await sync_to_async(fn)(**kwargs)


async def test_bad_json_and_bad_params_are_400_naming_the_param(key):
    client = AsyncClient()
    response = await post(client, "/v1/chat/completions", b"{not json", key)
    assert response.status_code == 400 and error_of(response)["code"] == "invalid_json"
    response = await post(client, "/v1/chat/completions", {**CHAT, "temperature": -1}, key)
    assert response.status_code == 400 and error_of(response)["param"] == "temperature"
    response = await post(client, "/v1/completions", {"model": "demo-model", "prompt": ["a", "b"]}, key)
    assert response.status_code == 400 and error_of(response)["param"] == "prompt"
    response = await post(client, "/v1/chat/completions", {**CHAT, "n": 3}, key)
    assert response.status_code == 400 and error_of(response)["param"] == "n"
    assert await Generation.objects.acount() == 0


async def test_body_too_large_is_413(key, monkeypatch):
    monkeypatch.setattr(config, "API_MAX_BODY_BYTES", 2048)
    body = {**CHAT, "messages": [{"role": "user", "content": "x" * 4096}]}
    response = await post(AsyncClient(), "/v1/chat/completions", body, key)
    assert response.status_code == 413 and error_of(response)["code"] == "request_too_large"
    assert await Generation.objects.acount() == 0


async def test_unknown_model_is_404_and_no_worker_is_503(key):
    client = AsyncClient()
    response = await post(client, "/v1/chat/completions", {**CHAT, "model": "gpt-4o"}, key)
    assert response.status_code == 404
    assert error_of(response) == {
        "message": error_of(response)["message"],
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    response = await post(client, "/v1/chat/completions", CHAT, key)  # no worker row is alive in this test
    assert response.status_code == 503 and error_of(response)["code"] == "no_worker"
    assert response["Retry-After"].isdigit()
    assert await Generation.objects.acount() == 0


async def test_wrong_method_and_unknown_path(key):
    client = AsyncClient()
    response = await client.get("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 405 and response["Allow"] == "POST"
    response = await client.get("/v1/embeddings", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 404 and error_of(response)["code"] == "unknown_url"


async def test_models_lists_the_configured_model(key):
    response = await AsyncClient().get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "list" and [m["id"] for m in data["data"]] == ["demo-model"]
    assert data["data"][0]["object"] == "model"


def test_create_api_key_command_prints_a_working_key(user, capsys):
    call_command("create_api_key", "alice", "--name", "script")
    printed = capsys.readouterr().out.strip()
    row = ApiKey.objects.get(user=user, name="script")
    assert printed.startswith(row.prefix + "_") and row.prefix in printed
    assert printed not in row.hashed_secret  # only a hash is stored
    from chatapp.api.keys import api_key_authenticate

    assert api_key_authenticate(printed).id == row.id
