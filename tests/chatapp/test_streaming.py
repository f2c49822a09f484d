"""Answers stream to their own user's sockets, in order, and equal what is stored."""

from __future__ import annotations

import asyncio

from tests.chatapp.helpers import LONG, assistant_message, generation_row, is_done, stream_text

PARAMS = {"max_tokens": 40, "temperature": 0.8}


async def _send(chat, content: str, **extra) -> dict:
    """Sends a message in a new conversation; returns the queued generation object."""
    await chat.send(
        type="send", conversation_id=None, content=content, params=PARAMS, request_id="s", **extra
    )
    events = await chat.recv_until(lambda e: e["type"] == "generation")
    kinds = [e["type"] for e in events]
    assert kinds == ["conversation", "message", "generation"], kinds
    assert all(e["request_id"] == "s" for e in events)
    return events[-1]["generation"]


async def test_two_users_stream_at_once_each_only_their_own(worker_handle, make_user, open_socket):
    alice, bob = await make_user("alice"), await make_user("bob")
    chat_a, chat_b = await open_socket(alice), await open_socket(bob)
    assert chat_a.hello["user"]["username"] == "alice" and chat_a.hello["user"]["is_guest"] is False
    gen_a = await _send(chat_a, "Tell me about the sea.")
    gen_b = await _send(chat_b, "What is a cache?")
    assert gen_a["state"] == gen_b["state"] == "queued"
    assert (gen_a["position"], gen_b["position"]) == (1, 2)
    for chat in (chat_a, chat_b):  # no worker yet: the answer stays queued and the user is told
        error = await chat.recv()
        assert error["type"] == "error" and error["code"] == "no_worker" and error["request_id"] == "s"
    await worker_handle.start()  # both rows wait in the queue, so one claim puts them in one batch

    events_a, events_b = await asyncio.gather(
        chat_a.recv_until(is_done(gen_a["id"])), chat_b.recv_until(is_done(gen_b["id"]))
    )
    for events, mine, other in ((events_a, gen_a, gen_b), (events_b, gen_b, gen_a)):
        ids = {e.get("generation_id") or e.get("generation", {}).get("id") for e in events}
        assert other["id"] not in ids  # nothing of the other user's answer reached this socket
        assert "started" in [e["type"] for e in events]
        done = events[-1]["generation"]
        assert done["state"] == "done" and done["finish_reason"] in ("stop", "length")
        streamed = stream_text(events, mine["id"])
        row = await generation_row(mine["id"])
        message = await assistant_message(mine["id"])
        assert streamed == row.text == message.content == done["text"]
        assert row.completion_tokens >= 1 and row.prompt_tokens >= 1 and row.ttft_ms is not None
    row_a, row_b = await generation_row(gen_a["id"]), await generation_row(gen_b["id"])
    assert row_a.worker_id == row_b.worker_id
    # Both were written in the same batch: each started before the other finished.
    assert row_a.started_at < row_b.finished_at and row_b.started_at < row_a.finished_at


async def test_two_sockets_on_one_conversation_both_stream(worker, make_user, open_socket):
    user = await make_user()
    first, second = await open_socket(user), await open_socket(user)
    await first.send(type="send", conversation_id=None, content="hello", params={"max_tokens": 5})
    created = (await first.recv_until(lambda e: e["type"] == "conversation"))[-1]["conversation"]
    await first.recv_until(is_done_any)
    history = await second.request(type="load", conversation_id=created["id"])
    assert history["type"] == "history" and [m["role"] for m in history["messages"]] == ["user", "assistant"]

    await first.send(type="send", conversation_id=created["id"], content="and more", params=PARAMS)
    from_first = await first.recv_until(lambda e: e["type"] == "done")
    from_second = await second.recv_until(lambda e: e["type"] == "done")
    gid = from_first[-1]["generation"]["id"]
    # The other socket saw the settings change, the message and the queued answer, then the stream.
    assert [e["type"] for e in from_second][:3] == ["conversation", "message", "generation"]
    assert "request_id" not in from_second[0]
    assert stream_text(from_first, gid) == stream_text(from_second, gid) == (await generation_row(gid)).text


def is_done_any(event: dict) -> bool:
    return event["type"] == "done"


async def test_resume_after_disconnect_continues_from_seq(worker_handle, make_user, open_socket):
    user = await make_user()
    chat = await open_socket(user)
    await chat.send(
        type="send", conversation_id=None, content="Write a lot.", params={**LONG, "max_tokens": 300}
    )
    gen = (await chat.recv_until(lambda e: e["type"] == "generation"))[-1]["generation"]
    await worker_handle.start()
    seen = await chat.recv_until(lambda e: e["type"] == "delta" and e["seq"] >= 2 or e["type"] == "done")
    got_before = stream_text(seen, gen["id"])
    last_seq = max(e["seq"] for e in seen if e["type"] == "delta")
    await chat.close()  # closing does not cancel

    again = await open_socket(user)
    await again.send(type="resume", generation_id=gen["id"], after_seq=last_seq, request_id="res")
    events = await again.recv_until(is_done(gen["id"]))
    snapshot = events[0]
    assert snapshot["type"] == "snapshot" and snapshot["request_id"] == "res"
    assert snapshot["generation"]["text"].startswith(got_before)
    assert snapshot["generation"]["seq"] >= last_seq
    row = await generation_row(gen["id"])
    assert row.state == "done"
    assert stream_text(events, gen["id"]) == row.text == (await assistant_message(gen["id"])).content
