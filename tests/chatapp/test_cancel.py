"""Cancel stops an answer in the engine, keeps its partial text, and frees its batch slot for the next one."""

from __future__ import annotations

from tests.chatapp.helpers import LONG, assistant_message, generation_row, is_done, stream_text


async def test_cancel_running_frees_the_slot_for_the_queued_answer(worker_handle, make_user, open_socket):
    alice, bob = await make_user("alice"), await make_user("bob")
    chat_a, chat_b = await open_socket(alice), await open_socket(bob)
    worker = await worker_handle.start(capacity=1)  # one slot: bob waits until alice's answer leaves

    await chat_a.send(type="send", conversation_id=None, content="Write a lot.", params=LONG)
    gen_a = (await chat_a.recv_until(lambda e: e["type"] == "generation"))[-1]["generation"]
    seen_a = await chat_a.recv_until(lambda e: e["type"] == "delta")

    await chat_b.send(type="send", conversation_id=None, content="Me too.", params={"max_tokens": 5})
    gen_b = (await chat_b.recv_until(lambda e: e["type"] == "generation"))[-1]["generation"]
    assert gen_b["state"] == "queued" and gen_b["position"] == 1

    await chat_a.send(type="cancel", generation_id=gen_a["id"], request_id="c")
    seen_a += await chat_a.recv_until(is_done(gen_a["id"]))
    done = seen_a[-1]["generation"]
    assert done["state"] == "stopped" and done["finish_reason"] == "abort"
    row = await generation_row(gen_a["id"])
    assert row.state == "stopped" and row.text  # the partial text is kept
    assert row.completion_tokens < 1500
    assert (
        stream_text(seen_a, gen_a["id"])
        == row.text
        == done["text"]
        == (await assistant_message(row.id)).content
    )

    events_b = await chat_b.recv_until(is_done(gen_b["id"]))  # the freed slot went to bob
    assert "started" in [e["type"] for e in events_b]
    assert events_b[-1]["generation"]["state"] == "done"
    # Asked for mid-step, the abort lands right after that step: by the end of bob's answer, which came from
    # later steps, the engine must no longer hold alice's request.
    assert worker.engine.abort(gen_a["id"]) is False


async def test_cancel_queued_answer_stops_it_at_once(worker_handle, make_user, open_socket):
    user = await make_user()
    chat = await open_socket(user)
    await chat.send(type="send", conversation_id=None, content="hi", request_id="s")
    gen = (await chat.recv_until(lambda e: e["type"] == "generation"))[-1]["generation"]
    reply = await chat.request(type="cancel", generation_id=gen["id"])
    assert reply["type"] == "done" and reply["generation"]["state"] == "stopped"
    await worker_handle.start()
    row = await generation_row(gen["id"])
    assert row.state == "stopped" and row.started_at is None  # never reached the engine
    again = await chat.request(type="cancel", generation_id=gen["id"])  # cancelling twice is harmless
    assert again["type"] == "done" and again["generation"]["state"] == "stopped"
