"""Message formats shared by the web processes and the inference worker (over the Redis channel layer).

Two directions:
- web -> workers: a *nudge* (group WORKERS_GROUP: "there may be queued rows, look") and a *cancel* (sent to the
  channel of the worker that holds the generation). Both only wake the worker; the database row is the truth.
- worker -> clients: protocol events (docs/protocol.md, server -> client) wrapped as {"type": "chat.event",
  "event": {...}} and sent to a conversation's group (chat) or a generation's group (API).

Imports neither torch nor Django models, so either side can use it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

WORKERS_GROUP = "inference-workers"
WORKER_CHANNEL_PREFIX = "inference-worker"
CLIENT_EVENT_TYPE = "chat.event"  # handled by ChatConsumer.chat_event and the API's stream reader


class MessageFormatError(ValueError):
    """A channel-layer message does not have the expected shape."""


def _hex(value: uuid.UUID | str) -> str:
    return uuid.UUID(str(value)).hex


def conversation_group(conversation_id: uuid.UUID | str) -> str:
    """Every socket following a conversation joins this group; its answers' events go there."""
    return f"chat-conv-{_hex(conversation_id)}"


def generation_group(generation_id: uuid.UUID | str) -> str:
    """The group an API request listens on for one generation's events."""
    return f"chat-gen-{_hex(generation_id)}"


# --- web -> worker ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobNudge:
    """Queued rows may be waiting: claim what fits."""


@dataclass(frozen=True)
class JobCancel:
    """Stop this generation in the engine now."""

    generation_id: str


def job_nudge() -> dict[str, Any]:
    return {"type": "job.nudge"}


def job_cancel(generation_id: uuid.UUID | str) -> dict[str, Any]:
    return {"type": "job.cancel", "generation_id": str(generation_id)}


def parse_worker_message(message: dict[str, Any]) -> JobNudge | JobCancel:
    """Parses what a worker receives; raises MessageFormatError for anything else."""
    kind = message.get("type") if isinstance(message, dict) else None
    if kind == "job.nudge":
        return JobNudge()
    if kind == "job.cancel":
        generation_id = message.get("generation_id")
        try:
            return JobCancel(generation_id=str(uuid.UUID(str(generation_id))))
        except (ValueError, TypeError):
            raise MessageFormatError(
                f"job.cancel needs a uuid generation_id, got {generation_id!r}"
            ) from None
    raise MessageFormatError(f"unknown worker message type {kind!r}")


# --- worker -> clients --------------------------------------------------------------------------------------------
def client_event(event: dict[str, Any]) -> dict[str, Any]:
    """Wraps a protocol event for group_send; the consumer forwards `event` to its socket as is."""
    return {"type": CLIENT_EVENT_TYPE, "event": event}


def unwrap_client_event(message: dict[str, Any]) -> dict[str, Any]:
    """The protocol event inside a client_event message; raises MessageFormatError otherwise."""
    event = message.get("event") if isinstance(message, dict) else None
    if message.get("type") != CLIENT_EVENT_TYPE or not isinstance(event, dict) or "type" not in event:
        raise MessageFormatError("not a chat.event message")
    return event


def started_event(generation_id: uuid.UUID | str) -> dict[str, Any]:
    return {"type": "started", "generation_id": str(generation_id)}


def queued_event(generation_id: uuid.UUID | str, position: int) -> dict[str, Any]:
    return {"type": "queued", "generation_id": str(generation_id), "position": int(position)}


def delta_event(generation_id: uuid.UUID | str, seq: int, text: str) -> dict[str, Any]:
    return {"type": "delta", "generation_id": str(generation_id), "seq": int(seq), "text": text}


def done_event(generation: dict[str, Any]) -> dict[str, Any]:
    """`generation` is the protocol's generation object (chatapp.serializers.generation_data)."""
    return {"type": "done", "generation": generation}
