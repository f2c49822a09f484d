"""Fixtures for the backend tests: the real engine on the demo model, an in-process worker, chat sockets.

Every test here runs against a real Redis process (tests.fixtures.redis_server) and the transactional test
database, since the worker's thread and the consumers' threads use their own database connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

RECV_TIMEOUT = (
    120.0  # a guard against hanging (this machine is shared and busy), never an assertion about speed
)


@pytest.fixture(scope="session")
def demo_engine(demo_model_dir):
    """One LLMEngine on the demo model for the whole session (each test's worker drives it)."""
    from inference.engine import LLMEngine

    return LLMEngine(
        str(demo_model_dir), dtype="float32", device="cpu", max_num_seqs=8, kv_cache_memory=64 << 20
    )


@pytest.fixture
def chat_env(transactional_db, redis_channel_layer, settings, demo_model_dir):
    """Settings for a test: the demo model, small limits and fast worker timings."""
    settings.LLM_MODEL = str(demo_model_dir)
    settings.LLM_MODEL_IS_DEMO = True
    settings.WORKER_FLUSH_MS = 20
    settings.WORKER_SWEEP_SECONDS = 0.3
    settings.CHAT_MAX_CONCURRENT_PER_USER = 3
    settings.CHAT_RATE_PER_MINUTE = 50
    return settings


class WorkerHandle:
    """Starts and stops an InferenceWorker running as a task on the test's event loop."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.worker = None
        self.task: asyncio.Task | None = None
        self.engine_stuck = False

    async def start(self, *, capacity: int = 8, **options):
        from django.conf import settings

        from inference.worker import InferenceWorker

        self.worker = InferenceWorker(
            self.engine,
            model_name=settings.LLM_MODEL,  # the name the web side queues answers under
            is_demo=True,
            max_context=self.engine.max_model_len,
            capacity=capacity,
            **options,
        )
        self.task = asyncio.create_task(self.worker.run())
        waiter = asyncio.create_task(self.worker.ready.wait())
        done, _ = await asyncio.wait(
            [waiter, self.task], timeout=RECV_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if self.task in done:
            self.task.result()  # raises the worker's start-up error
        if waiter not in done:
            raise RuntimeError("the worker did not become ready")
        return self.worker

    async def stop(self) -> None:
        """Stops the worker and makes sure its engine thread has ended; raises (failing the test) otherwise."""
        if self.task is None:
            return
        worker, task, self.task = self.worker, self.task, None
        worker.stop()
        try:
            done, _ = await asyncio.wait([task], timeout=RECV_TIMEOUT)
            if task not in done:
                task.cancel()
                await asyncio.wait([task], timeout=RECV_TIMEOUT)
                raise RuntimeError("the worker did not stop when asked")
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()
        finally:
            # Never hand the session's engine to the next test while this worker's engine thread still steps it.
            if worker.engine_thread_alive:
                await asyncio.to_thread(worker._stepper.stop, RECV_TIMEOUT)
            if worker.engine_thread_alive:
                self.engine_stuck = True
                raise RuntimeError("the worker's engine thread did not end: the shared engine is unusable")


@pytest.fixture
async def worker_handle(chat_env, demo_engine) -> AsyncIterator[WorkerHandle]:
    """A worker the test starts when it wants (`await worker_handle.start()`); stopped at the end."""
    if _stuck_engines:
        pytest.fail(
            "an earlier test left an engine thread stepping the shared engine (see its teardown error)"
        )
    handle = WorkerHandle(demo_engine)
    try:
        yield handle
        await handle.stop()
    finally:
        if handle.engine_stuck:
            _stuck_engines.append(demo_engine)
        await _close_thread_connections()


_stuck_engines: list = []  # the session engine, once a worker's engine thread failed to end


@pytest.fixture
async def worker(worker_handle):
    """A running worker (capacity 8)."""
    return await worker_handle.start()


class ChatSocket:
    """A chat websocket through the real ASGI application (origin check, session auth, consumer)."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.hello: dict | None = None

    async def send(self, **frame) -> None:
        await self.communicator.send_to(text_data=json.dumps(frame))

    async def send_raw(self, text: str) -> None:
        await self.communicator.send_to(text_data=text)

    async def recv(self, timeout: float = RECV_TIMEOUT) -> dict:
        return json.loads(await self.communicator.receive_from(timeout))

    async def recv_until(
        self, predicate: Callable[[dict], bool], timeout: float = RECV_TIMEOUT
    ) -> list[dict]:
        """Every event up to and including the first that matches `predicate`."""
        seen = []
        while True:
            event = await self.recv(timeout)
            seen.append(event)
            if predicate(event):
                return seen

    async def request(self, **frame) -> dict:
        """Sends a frame with a request_id and returns the first reply that echoes it."""
        frame.setdefault("request_id", f"r{id(frame)}")
        await self.send(**frame)
        events = await self.recv_until(lambda e: e.get("request_id") == frame["request_id"])
        return events[-1]

    async def nothing_pending(self) -> bool:
        return await self.communicator.receive_nothing(timeout=0.2)

    async def close(self) -> None:
        await self.communicator.disconnect()


def _session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def make_user(chat_env):
    counter = iter(range(1, 10_000))

    def create(name: str | None = None):
        return get_user_model().objects.create_user(
            username=name or f"user{next(counter)}", password="pw-123456"
        )

    return sync_to_async(create)


@pytest.fixture
async def open_socket(chat_env) -> AsyncIterator[Callable]:
    """`await open_socket(user)` -> a connected ChatSocket that has received its `hello`."""
    from chatapp.asgi import application

    sockets: list[ChatSocket] = []

    async def open_(user, *, origin: bytes = b"http://testserver", expect_hello: bool = True) -> ChatSocket:
        headers = [(b"host", b"testserver"), (b"origin", origin)]
        if user is not None:
            cookie = await sync_to_async(_session_cookie)(user)
            headers.append((b"cookie", f"sessionid={cookie}".encode()))
        communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        connected, _ = await communicator.connect(timeout=RECV_TIMEOUT)
        assert connected
        chat = ChatSocket(communicator)
        sockets.append(chat)
        if expect_hello:
            chat.hello = await chat.recv()
            assert chat.hello["type"] == "hello"
        return chat

    yield open_
    for chat in sockets:
        # A communicator whose receive timed out has had its application cancelled: closing it re-raises that.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await chat.close()
    await _close_thread_connections()


async def _close_thread_connections() -> None:
    """Closes the database connections of the thread that runs sync code for async tests, so that the test
    database can be dropped at the end of the session (PostgreSQL refuses while a session is connected)."""
    await sync_to_async(connections.close_all)()
