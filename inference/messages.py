"""Message formats shared by the web processes and the inference worker (over the Redis channel layer).

Two directions:
- web -> workers: a *nudge* (group WORKERS_GROUP: "there may be queued rows, look") and a *cancel* (sent to the
  channel of the worker that holds the generation). Both only wake the worker; the database row is the truth.
- worker -> chat sockets: protocol events (docs/protocol.md, server -> client) wrapped as {"type": "chat.event",
  "event": {...}} and sent to a conversation's group.
- worker -> API requests: one *relay batch* per flush per web process, sent to the relay channel of the process that
  holds the HTTP requests (chatapp.api.relay), which hands each event to its request's follower. One Redis message
  per flush instead of one per stream is what keeps the web path cheap at many concurrent requests.

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


RELAY_BATCH_TYPE = "api.relay"


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


# --- worker -> a web process's API relay ------------------------------------------------------------------------
@dataclass(frozen=True)
class RelayEvent:
    """One generation's news in a relay batch: its next delta (`seq`, `text`), or that it ended (`done`)."""

    generation_id: str
    seq: int = 0
    text: str = ""
    done: bool = False


def relay_delta(generation_id: uuid.UUID | str, seq: int, text: str) -> dict[str, Any]:
    return {"generation_id": str(generation_id), "seq": int(seq), "text": text}


def relay_done(generation_id: uuid.UUID | str) -> dict[str, Any]:
    """The row holds the final text, state and usage (checkpointed before this is sent)."""
    return {"generation_id": str(generation_id), "done": True}


def relay_batch(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": RELAY_BATCH_TYPE, "events": events}


def parse_relay_batch(message: dict[str, Any]) -> list[RelayEvent]:
    """The events of a relay batch; raises MessageFormatError when the message or any event is malformed."""
    events = message.get("events") if isinstance(message, dict) else None
    if message.get("type") != RELAY_BATCH_TYPE or not isinstance(events, list):
        raise MessageFormatError("not an api.relay batch")
    parsed = []
    for raw in events:
        if not isinstance(raw, dict):
            raise MessageFormatError(f"a relay event must be an object, got {raw!r}")
        try:
            generation_id = str(uuid.UUID(str(raw.get("generation_id"))))
        except ValueError:
            raise MessageFormatError(f"a relay event needs a uuid generation_id, got {raw!r}") from None
        if raw.get("done") is True:
            parsed.append(RelayEvent(generation_id, done=True))
            continue
        seq, text = raw.get("seq"), raw.get("text")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1 or not isinstance(text, str):
            raise MessageFormatError(f"a relay delta needs seq >= 1 and text, got {raw!r}")
        parsed.append(RelayEvent(generation_id, seq=seq, text=text))
    return parsed
