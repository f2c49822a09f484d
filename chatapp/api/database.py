"""Where the API's database calls run: a few long-lived threads of this process (chatapp.db.DatabaseThreads).

Not the request's own thread, which Django makes per request under ASGI: there every call connected anew on
SQLite, three times per streamed request. A call holds a thread for a millisecond or two, so the default four are
plenty unless calls wait on locks (API_DATABASE_THREADS); on PostgreSQL the pool (DATABASE_POOL_SIZE) bounds the
connections they use.
"""

from __future__ import annotations

from django.conf import settings

from chatapp.api.config import API_DATABASE_THREADS
from chatapp.db import DatabaseThreads

THREADS = API_DATABASE_THREADS

_threads = DatabaseThreads(THREADS, settings.DATABASE_CONN_MAX_AGE, "api-db")
run = _threads.run
