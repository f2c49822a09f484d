"""Small helpers shared by the backend tests (reading rows, collecting an answer's stream)."""

from __future__ import annotations

from channels.db import database_sync_to_async as sync_to_async

from chatapp.models import Generation, Message

# Greedy decoding of "Write a lot." on the demo model runs to max_tokens without an end token (checked once;
# the demo model is built deterministically), so an answer sent with these params is still running when a test
# cancels it, stops its worker, or resumes it.
LONG = {"max_tokens": 1500, "temperature": 0}


@sync_to_async
def generation_row(generation_id) -> Generation:
    return Generation.objects.get(id=generation_id)


@sync_to_async
def assistant_message(generation_id) -> Message:
    return Message.objects.get(generation_id=generation_id)


@sync_to_async
def count_generations() -> int:
    return Generation.objects.count()


def stream_text(events: list[dict], generation_id: str) -> str:
    """The answer's text as a client builds it: deltas in seq order (checked consecutive), snapshots replace."""
    text, seq = "", 0
    for event in events:
        if event["type"] == "snapshot" and event["generation"]["id"] == generation_id:
            text, seq = event["generation"]["text"], event["generation"]["seq"]
        elif event["type"] == "delta" and event["generation_id"] == generation_id:
            assert event["seq"] == seq + 1, f"delta seq {event['seq']} after {seq}"
            text += event["text"]
            seq = event["seq"]
    return text


def is_done(generation_id: str):
    return lambda e: e["type"] == "done" and e["generation"]["id"] == generation_id
