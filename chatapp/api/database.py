"""Where the API's database calls run: a few long-lived threads of this process (chatapp.db.DatabaseThreads).

Not the request's own thread, which Django makes per request under ASGI: there every call connected anew on
SQLite, three times per streamed request. Four threads are plenty: a call holds one for a millisecond or two, and
on PostgreSQL the pool (DATABASE_POOL_SIZE) bounds the connections they use.
"""

from __future__ import annotations

from django.conf import settings

from chatapp.db import DatabaseThreads

THREADS = 4

_threads = DatabaseThreads(THREADS, settings.DATABASE_CONN_MAX_AGE, "api-db")
run = _threads.run
