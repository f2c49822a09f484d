"""OS thread names, read back from /proc: a fresh thread's own name, the 15-byte cut, and the engine thread's name."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from inference.threadnames import set_native_thread_name

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")


def os_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().rstrip("\n")


def name_in_fresh_thread(name: str) -> str:
    """Starts a thread that names itself `name` and reads its OS name back while it is still alive."""
    named, done = threading.Event(), threading.Event()
    ids: list[int] = []

    def body() -> None:
        set_native_thread_name(name)
        ids.append(threading.get_native_id())
        named.set()
        done.wait()

    thread = threading.Thread(target=body)
    thread.start()
    try:
        named.wait()
        return os_name(ids[0])
    finally:
        done.set()
        thread.join()


def test_a_thread_names_itself_and_only_itself() -> None:
    main_before = os_name(threading.get_native_id())
    assert name_in_fresh_thread("worker-db") == "worker-db"
    assert os_name(threading.get_native_id()) == main_before


def test_a_long_name_is_cut_to_15_bytes_never_inside_a_character() -> None:
    assert name_in_fresh_thread("a-name-longer-than-fifteen") == "a-name-longer-t"
    assert name_in_fresh_thread("engine-步步步步") == "engine-步步"  # 7 + 2 x 3 bytes; a third would be 16


def test_the_engine_thread_is_named_engine_step(demo_model_dir) -> None:
    from inference.engine import LLMEngine, SamplingParams
    from inference.stepper import EngineStepper

    engine = LLMEngine(str(demo_model_dir), dtype="float32", device="cpu")

    async def run() -> str:
        loop = asyncio.get_running_loop()
        stepped: asyncio.Future = loop.create_future()
        stepper = EngineStepper(
            engine,
            loop=loop,
            has_work=lambda: engine.has_unfinished_requests(),
            on_outputs=lambda outputs: stepped.done() or stepped.set_result(outputs),
            on_step_error=lambda exc: stepped.done() or stepped.set_exception(exc),
        )
        stepper.start()
        try:
            engine.add_request("r1", "Hello", params=SamplingParams(max_tokens=2, ignore_eos=True))
            stepper.wake()
            # a hang guard only: the thread names itself before its first step
            await asyncio.wait_for(stepped, 120)
            return os_name(stepper._thread.native_id)
        finally:
            assert await asyncio.to_thread(stepper.stop)

    assert asyncio.run(run()) == "engine-step"
