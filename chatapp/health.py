"""GET /health: is the database up, does Redis answer, which workers are alive (JSON; 503 when not ready)."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse

from chatapp.selectors import workers_alive


async def _redis_ok() -> tuple[bool, str]:
    layer = get_channel_layer()
    try:
        # The default prefix: channels_redis has one receive lock per process, and its holder pops only its own
        # prefix's Redis key, so a channel of another prefix waits behind the consumers' and the API relay's.
        name = await asyncio.wait_for(layer.new_channel(), timeout=2)
        await asyncio.wait_for(layer.send(name, {"type": "health.ping"}), timeout=2)
        await asyncio.wait_for(layer.receive(name), timeout=2)
    except Exception as exc:  # any failure to reach Redis is the answer, not a crash
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def _database_report() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        workers = [
            {
                "id": str(w.id),
                "host": w.hostname,
                "pid": w.pid,
                "model": w.model,
                "is_demo": w.is_demo,
                "running": w.running,
                "capacity": w.capacity,
                "last_heartbeat": w.last_heartbeat.isoformat(),
            }
            for w in workers_alive()
        ]
    except Exception as exc:  # a broken database is the answer, not a crash
        return {"database": {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, "workers": []}
    return {"database": {"ok": True}, "workers": workers}


async def health(request):
    """Reports the database, Redis and live workers; status 200 only when all three are fine."""
    report = await sync_to_async(_database_report)()
    ok, error = await _redis_ok()
    report["redis"] = {"ok": True} if ok else {"ok": False, "error": error}
    report["ok"] = report["database"]["ok"] and ok and bool(report["workers"])
    return JsonResponse(report, status=200 if report["ok"] else 503)
