"""Database connections where they can be kept: the worker's one thread, and a few long-lived threads for the API.

Web processes close their connection after each request or call (chatapp.settings), because Django runs each HTTP
request's calls in a thread of its own. Code that runs its calls on threads of its own can keep a connection per
thread instead, and save a connect per call.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections

P = ParamSpec("P")
R = TypeVar("R")


def keep_connection_open(max_age: int) -> None:
    """Makes this process connect directly (no pool) and keep its connection for `max_age` seconds.

    For the worker, whose database calls all run in one thread, so the connection is reused: reconnecting for each
    call cost 0.6 ms on SQLite and 4 ms on PostgreSQL here, and the worker checkpoints many times a second. Also for
    one-off checks, where a pool would keep retrying an unreachable server for its timeout instead of failing.
    Call before the first query.
    """
    if connections[DEFAULT_DB_ALIAS].connection is not None:
        raise RuntimeError("keep_connection_open() must run before the first database query")
    config = connections.settings[DEFAULT_DB_ALIAS]
    config["CONN_MAX_AGE"] = max_age
    config.get("OPTIONS", {}).pop("pool", None)


class DatabaseThreads:
    """Runs sync database calls on `size` long-lived threads; each keeps its connection for `max_age` seconds.

    Where the database has a pool (PostgreSQL in web processes), the threads borrow from it per call instead: a
    pooled connection costs nothing to take, while a kept one would be health-checked (a round trip) per call.
    Elsewhere (SQLite) a kept connection saves a connect per call: about 2 ms of CPU on a slow core, most of a
    small query's cost. Around each call Django's usual rules apply (close_old_connections): a connection that
    broke or outlived `max_age` is closed and the next call reconnects.
    """

    def __init__(self, size: int, max_age: int, name: str) -> None:
        self._executor = ThreadPoolExecutor(
            size, thread_name_prefix=name, initializer=self._keep, initargs=(max_age,)
        )

    @staticmethod
    def _keep(max_age: int) -> None:
        connection = connections[DEFAULT_DB_ALIAS]
        if connection.settings_dict.get("OPTIONS", {}).get("pool"):
            return
        # This thread's own copy: other threads of the process keep closing after every call.
        connection.settings_dict = {**connection.settings_dict, "CONN_MAX_AGE": max_age}

    @staticmethod
    def _call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """fn(*args, **kwargs) on one of the threads; the caller's task awaits it (a cancel does not stop it)."""
        call = functools.partial(self._call, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)
