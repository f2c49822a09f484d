"""A worker whose engine runs in a child process (the default outside tests): answers stream as with the engine in
a thread, and a child that dies fails the answers it was writing and stops the worker, so nothing stays running
and a supervisor can restart it."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from chatapp.services import WORKER_STOPPED_ERROR
from inference.engine_process import EngineDied, EngineProcess
from inference.worker import ENGINE_DIED_ERROR
from tests.chatapp.conftest import RECV_TIMEOUT, WorkerHandle
from tests.chatapp.helpers import LONG, generation_row, is_done, stream_text


@pytest.fixture
async def process_worker(chat_env, demo_model_dir):
    engine = await asyncio.to_thread(
        EngineProcess,
        str(demo_model_dir),
        dtype="float32",
        device="cpu",
        max_num_seqs=8,
        kv_cache_memory=64 << 20,
    )
    handle = WorkerHandle(engine)
    try:
        yield handle
    finally:
        try:
            await handle.stop()
        finally:
            await asyncio.to_thread(engine.close)


async def _send(chat, content: str, params: dict) -> str:
    await chat.send(type="send", conversation_id=None, content=content, params=params)
    return (await chat.recv_until(lambda e: e["type"] == "generation"))[-1]["generation"]["id"]


async def test_an_answer_streams_from_the_engine_process(process_worker, make_user, open_socket):
    await process_worker.start()
    chat = await open_socket(await make_user())
    gid = await _send(chat, "hello", {"max_tokens": 12, "temperature": 0})
    events = await chat.recv_until(is_done(gid))
    done = events[-1]["generation"]
    assert done["state"] == "done" and done["text"] and stream_text(events, gid) == done["text"]
    assert (await generation_row(gid)).completion_tokens == 12


async def test_a_dead_engine_process_fails_its_answers_and_stops_the_worker(
    process_worker, make_user, open_socket
):
    worker = await process_worker.start()
    chat = await open_socket(await make_user())
    gid = await _send(chat, "Write a lot.", LONG)
    await chat.recv_until(lambda e: e["type"] == "delta" and e["generation_id"] == gid)
    os.kill(process_worker.engine.pid, signal.SIGKILL)
    done = (await chat.recv_until(is_done(gid)))[-1]["generation"]
    assert done["state"] == "failed" and done["error"] in (ENGINE_DIED_ERROR, WORKER_STOPPED_ERROR)
    await asyncio.wait_for(process_worker.task, RECV_TIMEOUT)  # run() returned: the worker stopped by itself
    process_worker.task = None
    assert isinstance(worker.engine_failure, EngineDied) and not worker.engine_thread_alive
    row = await generation_row(gid)
    assert row.state == "failed" and row.finished_at is not None
