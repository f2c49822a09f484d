"""Channel-layer sends from the web side: nudge the workers, tell a worker to cancel, events to a group.

Redis carries wake-ups and deltas only (the database is the truth), so a send that fails is logged and dropped:
the workers' sweep finds queued rows, the cancel flag on the row is read at the next checkpoint.
"""

from __future__ import annotations

import logging
import uuid

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer

from inference import messages

log = logging.getLogger(__name__)


async def nudge_workers() -> None:
    """Wakes every worker to claim queued rows (call after the row's transaction committed)."""
    try:
        await get_channel_layer().group_send(messages.WORKERS_GROUP, messages.job_nudge())
    except Exception:
        log.warning("could not nudge the workers; their sweep will find the row", exc_info=True)


async def send_cancel(worker_channel: str, generation_id: uuid.UUID | str) -> None:
    """Asks the worker writing this generation to abort it now (the row's cancel flag is the backstop)."""
    try:
        await get_channel_layer().send(worker_channel, messages.job_cancel(generation_id))
    except ChannelFull:
        log.warning("worker channel full; the cancel flag will stop %s at its next checkpoint", generation_id)
    except Exception:
        log.warning("could not send a cancel for %s", generation_id, exc_info=True)


async def group_event(group: str, event: dict, *, skip_channel: str | None = None) -> None:
    """Sends a protocol event to every socket in `group` (except `skip_channel`, which answered itself)."""
    message = messages.client_event(event)
    if skip_channel:
        message["skip"] = skip_channel
    try:
        await get_channel_layer().group_send(group, message)
    except Exception:
        log.warning("could not send a %s event to %s", event.get("type"), group, exc_info=True)
