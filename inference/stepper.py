"""The engine's own thread: calls LLMEngine.step() while there is work and hands each step's outputs to asyncio.

The worker's asyncio loop (Redis, database) and the engine never wait on each other: the loop adds and aborts
requests (the engine allows that from another thread) and wakes this thread; this thread steps and posts outputs
back with `call_soon_threadsafe`. Imports no Django and no Redis.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from inference.engine_process import ENGINE_THREAD_NAME, EngineDied
from inference.threadnames import set_native_thread_name

log = logging.getLogger(__name__)


class EngineStepper:
    """Runs `engine.step()` in a daemon thread while `has_work()` says so; sleeps on an event otherwise."""

    IDLE_WAIT_S = 0.5  # a missed wake-up costs at most this long

    def __init__(
        self,
        engine,
        *,
        loop: asyncio.AbstractEventLoop,
        has_work: Callable[[], bool],
        on_outputs: Callable[[list], None],
        on_step_error: Callable[[BaseException], None],
    ) -> None:
        self._engine = engine
        self._loop = loop
        self._has_work = has_work
        self._on_outputs = on_outputs
        self._on_step_error = on_step_error
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=ENGINE_THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Call after adding a request, so an idle thread starts stepping at once."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> bool:
        """Asks the thread to end after its current step and waits up to `timeout`; True once it has ended.

        Another thread may drive the same engine only after this returned True.
        """
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _wait_for_work(self) -> bool:
        """True when the engine has something to step; waits up to IDLE_WAIT_S otherwise."""
        waiter = getattr(self._engine, "wait_for_work", None)
        if waiter is not None:
            return bool(waiter(self.IDLE_WAIT_S))
        if self._has_work():
            return True
        self._wake.wait(self.IDLE_WAIT_S)
        self._wake.clear()
        return False

    def _run(self) -> None:
        # shown in `top -H`; torch's helper threads started from this thread inherit the name
        set_native_thread_name(ENGINE_THREAD_NAME)
        while not self._stop.is_set():
            if not self._wait_for_work():
                continue
            try:
                outputs = self._engine.step()
            except EngineDied as exc:  # an engine process that ended: nothing more will come
                log.error("%s", exc)
                self._post(self._on_step_error, exc)
                return
            # the engine ends a failing step's requests itself; this is the last resort
            except Exception as exc:
                log.exception("engine step failed")
                self._post(self._on_step_error, exc)
                self._stop.wait(0.1)
                continue
            if outputs:
                self._post(self._on_outputs, list(outputs))

    def _post(self, callback: Callable, argument) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, argument)
        except RuntimeError:  # the loop closed while shutting down
            self._stop.set()
