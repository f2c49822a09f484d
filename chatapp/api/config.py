"""API limits, read from the environment with embedded defaults (see README "Configuration")."""

from __future__ import annotations

from chatapp.env import env_float, env_int

# A request body larger than this is refused with 413 before it is parsed.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
# Generations one key may have queued or running at once; one more gets 429.
API_MAX_CONCURRENT_PER_KEY = env_int("API_MAX_CONCURRENT_PER_KEY", 32, minimum=1)
# How long a stream waits for a delta before it checks the row itself (a lost delta or "done").
API_STREAM_POLL_SECONDS = env_float("API_STREAM_POLL_SECONDS", 1.0, minimum=0.05, maximum=60.0)
# Threads per web process that run the API's database calls (chatapp.api.database); a call waiting on a lock holds
# one, so more of them let other requests go on meanwhile.
API_DATABASE_THREADS = env_int("API_DATABASE_THREADS", 4, minimum=1, maximum=64)
