"""Lost messages and dead workers never lose or strand work: sweeps, leases, and the engine's own checks."""

from __future__ import annotations

import asyncio
import uuid

from channels.db import database_sync_to_async as sync_to_async

from chatapp import services
from chatapp.services import LEASE_EXPIRED_ERROR, WORKER_STOPPED_ERROR
from tests.chatapp.helpers import LONG, assistant_message, generation_row, is_done


async def _queued_answer(chat, content="hello", params=None) -> dict:
    await chat.send(type="send", conversation_id=None, content=content, params=params or {"max_tokens": 20})
    return (await chat.recv_until(lambda e: e["type"] == "generation"))[-1]["generation"]


def _gone_worker(model: str, suffix: str):
    """A worker row whose process is gone: it never renews a lease."""
    return services.worker_register(
        channel_name=f"inference-worker.gone!{suffix}", hostname="gone", pid=1, model=model, is_demo=True,
        max_context=2048, capacity=1,
    )  # fmt: skip


async def test_lease_of_a_dead_worker_expires_and_the_answer_fails(
    worker_handle, chat_env, make_user, open_socket
):
    chat_env.WORKER_LEASE_SECONDS = 1.0
    chat = await open_socket(await make_user())
    gen = await _queued_answer(chat)

    @sync_to_async
    def dead_worker_takes_it():
        dead = _gone_worker(chat_env.LLM_MODEL, "x")
        (claimed,) = services.generation_claim(worker=dead, limit=1)
        cp = services.Checkpoint(generation_id=claimed.id, text="partial", seq=1)
        services.generation_checkpoint(worker=dead, checkpoints=[cp], active_ids=[claimed.id])
        return claimed  # ...and the worker process dies here: nobody renews the lease

    claimed = await dead_worker_takes_it()
    assert str(claimed.id) == gen["id"] and claimed.state == "running"
    await worker_handle.start()  # a live worker's sweep finds the expired lease
    done = (await chat.recv_until(is_done(gen["id"])))[-1]["generation"]
    assert done["state"] == "failed" and done["error"] == LEASE_EXPIRED_ERROR and done["text"] == "partial"
    row = await generation_row(gen["id"])
    assert row.state == "failed" and row.finished_at is not None and row.lease_expires_at is None
    assert (await assistant_message(gen["id"])).content == "partial"


async def test_a_lost_nudge_is_swept_up(worker, make_user, open_socket):
    user = await make_user()
    # The service writes the queued row; nobody nudges the workers (as if Redis dropped the nudge).
    result = await sync_to_async(services.chat_send)(
        user=user, conversation_id=None, content="anyone there?", params={"max_tokens": 10}
    )
    chat = await open_socket(user)
    history = await chat.request(type="load", conversation_id=str(result.conversation.id))
    generation = history["messages"][-1]["generation"]
    if generation["state"] in ("queued", "running"):
        await chat.recv_until(is_done(generation["id"]))
    row = await generation_row(result.generation.id)
    assert row.state == "done" and row.worker_id == worker.row.id
    assert row.text == (await assistant_message(row.id)).content


async def test_stopping_a_worker_fails_what_it_was_writing(worker_handle, make_user, open_socket):
    chat = await open_socket(await make_user())
    await worker_handle.start()
    gen = await _queued_answer(chat, content="Write a lot.", params=LONG)
    await chat.recv_until(lambda e: e["type"] == "delta")
    await worker_handle.stop()
    done = (await chat.recv_until(is_done(gen["id"])))[-1]["generation"]
    assert done["state"] == "failed" and done["error"] == WORKER_STOPPED_ERROR
    row = await generation_row(gen["id"])
    assert row.state == "failed" and row.text == done["text"]


async def test_prompt_refused_by_the_engine_fails_with_its_reason(
    worker_handle, chat_env, make_user, open_socket
):
    # Without a tokenizer at hand the web side cannot count tokens; the engine's check is the backstop.
    chat_env.LLM_MODEL = f"/nonexistent/{uuid.uuid4()}"
    chat = await open_socket(await make_user())
    gen = await _queued_answer(chat, content="many words " * 40, params={"max_tokens": 2047})
    await worker_handle.start()
    done = (await chat.recv_until(is_done(gen["id"])))[-1]["generation"]
    assert done["state"] == "failed"
    assert done["error"].startswith("The request was refused by the model:") and "max_tokens" in done["error"]


async def test_queue_positions_are_sent_as_they_change(worker_handle, make_user, open_socket):
    users = [await make_user() for _ in range(3)]
    chats = [await open_socket(u) for u in users]
    gens = [await _queued_answer(c, params={"max_tokens": 30}) for c in chats]
    assert [g["position"] for g in gens] == [1, 2, 3]
    await worker_handle.start(capacity=1)
    # The third answer moves up as the ones before it get the slot, until it starts.
    events = await chats[2].recv_until(lambda e: e["type"] == "started")
    positions = [e["position"] for e in events if e["type"] == "queued"]
    assert positions and positions == sorted(positions, reverse=True) and positions[-1] == 1
    await asyncio.gather(*(c.recv_until(is_done(g["id"])) for c, g in zip(chats, gens, strict=True)))


async def test_a_worker_expires_only_leases_of_its_own_model(chat_env, make_user, open_socket):
    # Another model's pool (in tests: the session stack, with a Redis of its own) must not fail, and announce
    # where nobody listens, the answers of this model; this model's workers do.
    chat_env.WORKER_LEASE_SECONDS = -1.0  # every lease taken below is expired already
    chat = await open_socket(await make_user())
    gen = await _queued_answer(chat)

    @sync_to_async
    def dead_worker_takes_it_then_sweeps():
        dead = _gone_worker(chat_env.LLM_MODEL, "y")
        services.generation_claim(worker=dead, limit=1)
        by_others = services.generation_expire_leases(model=f"/elsewhere/{uuid.uuid4()}")
        by_its_own = services.generation_expire_leases(model=chat_env.LLM_MODEL)
        return by_others, by_its_own

    by_others, by_its_own = await dead_worker_takes_it_then_sweeps()
    assert by_others == [] and [str(g.id) for g in by_its_own] == [gen["id"]]
    assert by_its_own[0].state == "failed" and by_its_own[0].error == LEASE_EXPIRED_ERROR
