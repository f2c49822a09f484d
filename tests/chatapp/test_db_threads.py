"""chatapp.db.DatabaseThreads keeps one connection per thread where there is no pool, and none where there is."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from chatapp.db import DatabaseThreads

pytestmark = pytest.mark.django_db(transaction=True)


def _connected_then_query() -> bool:
    """Whether this thread's connection was already open when the call began; then one query."""
    was_open = connection.connection is not None
    get_user_model().objects.count()
    return was_open


def _pooled() -> bool:
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


async def test_a_thread_keeps_its_connection_for_max_age_unless_a_pool_lends_it():
    kept = DatabaseThreads(1, 60, "test-db-kept")
    pooled = await kept.run(_pooled)  # PostgreSQL in web processes
    await kept.run(_connected_then_query)
    # The second call on the same thread finds the first call's connection still open, unless it went back to a pool.
    assert await kept.run(_connected_then_query) is (not pooled)


async def test_with_max_age_0_each_call_connects_anew():
    closing = DatabaseThreads(1, 0, "test-db-closing")
    await closing.run(_connected_then_query)
    assert await closing.run(_connected_then_query) is False
