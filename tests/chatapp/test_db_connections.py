"""Database connections stay bounded: a burst of HTTP requests leaves no more connections in Daphne than it keeps
on purpose.

Django runs each HTTP request's database calls in a thread of its own under ASGI, so connections kept for reuse
are never reused; web processes close theirs after each request (SQLite) or return them to a bounded pool
(PostgreSQL). The API's calls run on a few threads of their own (chatapp.api.database), which keep one connection
each on SQLite. The worker, whose calls all run in one thread, keeps its own connection.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection

from chatapp.api import database as database_threads
from chatapp.api.keys import api_key_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
BURST = 60  # concurrent requests, more than the default pool of 10
TIMEOUT = 60.0  # a guard against hanging, not a speed assertion


@database_sync_to_async
def _new_key() -> str:
    user = get_user_model().objects.create_user(username="burst", password="pw-123456")
    return api_key_create(user=user, name="burst")[1]


def _sqlite_handles(pid: int, database: str) -> int:
    """Open file descriptors of process `pid` on the SQLite database file."""
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            if os.readlink(fd) == database:
                count += 1
        except OSError:  # closed meanwhile
            continue
    return count


@database_sync_to_async
def _postgres_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


async def _burst(url: str, key: str) -> list[int]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
        replies = await asyncio.gather(*(client.get("/v1/models", headers=headers) for _ in range(BURST)))
    return [r.status_code for r in replies]


async def test_a_burst_of_requests_leaves_no_connections_behind(chat_stack_live):
    key = await _new_key()
    daphne = next(c for c in chat_stack_live.children if c.name == "daphne")
    engine = connection.settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        database = str(Path(connection.settings_dict["NAME"]).resolve())
        for _ in range(2):  # the second burst reuses the first one's connections
            assert await _burst(chat_stack_live.url, key) == [200] * BURST
            # The API's database threads keep theirs (one each at most), whatever the number of requests.
            assert 1 <= _sqlite_handles(daphne.process.pid, database) <= database_threads.THREADS
    elif engine.endswith("postgresql"):
        before = await _postgres_connections()
        assert await _burst(chat_stack_live.url, key) == [200] * BURST
        await _burst(chat_stack_live.url, key)  # a second burst borrows the same pooled connections
        assert await _postgres_connections() <= before + 10  # DATABASE_POOL_SIZE's default
    else:
        pytest.skip(f"no connection count for {engine}")
