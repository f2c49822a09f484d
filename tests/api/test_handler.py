"""/v1 goes through the API's own ASGI handler (chatapp.api.handler), the rest of the site through Django's full
middleware, both in the real ASGI application."""

from __future__ import annotations

import json

import pytest
from channels.testing import HttpCommunicator
from django.contrib.auth import get_user_model

from chatapp.api.handler import is_api_path
from chatapp.api.keys import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key() -> str:
    user = get_user_model().objects.create_user(username="alice", password="pw-alice-123")
    return api_key_create(user=user, name="test")[1]


async def call(path: str, *, host: str = "testserver", key: str | None = None) -> dict:
    from chatapp.asgi import application

    headers = [(b"host", host.encode())]
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    response = await HttpCommunicator(application, "GET", path, headers=headers).get_response(timeout=10)
    response["headers"] = {name.decode().lower(): value.decode() for name, value in response["headers"]}
    return response


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1", False),
        ("/v1/", True),
        ("/v1/models", True),
        ("/v1x", False),
        ("/v10/models", False),
        ("/", False),
    ],
)
def test_which_paths_are_the_apis(path, expected):
    assert is_api_path(path) is expected


async def test_an_api_call_skips_the_browser_middleware_and_is_marked_nosniff(key):
    response = await call("/v1/models", key=key)
    assert response["status"] == 200
    assert json.loads(response["body"])["object"] == "list"
    assert response["headers"]["x-content-type-options"] == "nosniff"
    assert response["headers"]["content-length"] == str(len(response["body"]))
    assert "x-frame-options" not in response["headers"]  # XFrameOptionsMiddleware did not run
    assert "set-cookie" not in response["headers"]
    page = await call("/health")  # the rest of the site keeps its middleware
    assert page["headers"]["x-frame-options"] == "DENY"


async def test_an_api_call_to_a_host_outside_allowed_hosts_is_refused_in_openai_shape(key, caplog):
    response = await call("/v1/models", host="evil.example", key=key)
    assert response["status"] == 400
    assert response["headers"]["x-content-type-options"] == "nosniff"
    error = json.loads(response["body"])["error"]
    assert error["code"] == "disallowed_host" and "evil.example" not in error["message"]
    assert any(
        "evil.example" in r.getMessage() for r in caplog.records if r.name == "django.security.DisallowedHost"
    )


async def test_a_bare_v1_is_redirected_to_the_api_and_gets_its_json_404():
    response = await call("/v1")
    assert response["status"] == 301 and response["headers"]["location"] == "/v1/"
    response = await call("/v1/")
    assert response["status"] == 404 and json.loads(response["body"])["error"]["code"] == "unknown_url"
