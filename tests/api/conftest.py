"""Fixtures for the API tests: a user with an API key in the test database that the stack's processes share."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

WAIT_S = 60.0  # a guard against hanging, never an assertion about speed


@dataclass
class ApiClientInfo:
    base_url: str  # http://127.0.0.1:PORT/v1
    key: str
    user: object
    model: str  # the id GET /v1/models reports


def wait_for(predicate, what: str, timeout: float = WAIT_S):
    """Polls `predicate` until it returns something truthy; fails the test if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


@pytest.fixture
def api(chat_stack, transactional_db) -> ApiClientInfo:
    """A fresh user and key, once the stack's worker row is back (the transactional database is flushed between
    tests, and the worker re-registers itself at its next heartbeat)."""
    from chatapp.api.keys import api_key_create
    from chatapp.selectors import workers_alive

    wait_for(workers_alive, "a live worker row")
    user = get_user_model().objects.create_user(username="api-user", password="pw-api-user-1")
    _row, key = api_key_create(user=user, name="tests")
    return ApiClientInfo(
        f"{chat_stack.url}/v1", key, user, model=chat_stack.env["LLM_MODEL"].rstrip("/").split("/")[-1]
    )
