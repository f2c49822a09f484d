"""The engine in a process of its own, driven over two pipes: the worker's loop and the engine stop sharing a GIL.

Run in a thread of the worker, the engine's step waited for the GIL behind the worker's asyncio loop and database
thread (9 to 14% of its time at 16 streams on 2 cores, measured with `bench/api.py --profile`). Here the child
process owns the engine; vLLM's engine core splits the same way. The worker talks to an `EngineProcess`, which
offers what inference.stepper and the worker use of an LLMEngine:

- `add_request` and `abort` send a command and return at once. A request the engine refuses (too long, say) comes
  back as a finished output with finish_reason "error", where the in-thread engine raised ValueError.
- `wait_for_work(timeout)` and `step()` read the next batch of outputs the child sends after each of its steps.
- a child that dies makes `step()` raise `EngineDied`; the worker then fails its answers and stops.

The child is started with "spawn", so it shares no locks or threads with the worker. It ends when told to, or
when its commands pipe closes because the worker went away. Imports no Django, no Redis, and (in the worker) no
torch.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from collections.abc import Sequence
from typing import Any

from inference.engine.outputs import RequestOutput
from inference.threadnames import set_native_thread_name

log = logging.getLogger(__name__)
START_TIMEOUT_S = 600.0  # loading a large model from a slow disk takes minutes
CHILD_IDLE_WAIT_S = 0.5  # how long the idle child blocks on its commands pipe before looking again
# the child's stepping thread, as `top -H` and bench/api.py --profile see it
ENGINE_THREAD_NAME = "engine-step"


class EngineStartError(RuntimeError):
    """The child could not load the model; the message is the child's own error."""


class EngineDied(RuntimeError):
    """The engine process ended while the worker still needed it."""


class EngineProcess:
    """An LLMEngine(model, **options) in a child process; see the module docstring for the contract."""

    def __init__(self, model: str, *, start_timeout: float = START_TIMEOUT_S, **options: Any) -> None:
        context = multiprocessing.get_context("spawn")
        commands_in, self._commands = context.Pipe(duplex=False)
        self._outputs, outputs_out = context.Pipe(duplex=False)
        self._process = context.Process(
            target=serve, args=(str(model), options, commands_in, outputs_out), name="llm-engine", daemon=True
        )
        self._send_lock = threading.Lock()
        self._closed = False
        self._process.start()
        commands_in.close()  # the child holds these ends now: EOF then means the other side went away
        outputs_out.close()
        try:
            ready = self._receive(start_timeout)
        except EngineDied as exc:
            self.close(timeout=5)
            raise EngineStartError(str(exc)) from None
        if ready is None:
            self.close(timeout=5)
            raise EngineStartError(f"the engine process did not load {model!r} within {start_timeout:.0f} s")
        kind, payload = ready
        if kind != "ready":
            self.close(timeout=5)
            raise EngineStartError(payload)
        self.max_model_len: int = payload["max_model_len"]

    @property
    def pid(self) -> int | None:
        return self._process.pid

    # --- commands (from the worker's loop) -----------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int] | None = None,
        *,
        messages: Sequence[dict[str, Any]] | None = None,
        params: Any = None,
        user_id: str | int | None = None,
    ) -> None:
        """Queues a request in the child; a refusal arrives later as an "error" output for `request_id`."""
        self._send(
            (
                "add",
                request_id,
                {"prompt": prompt, "messages": messages, "params": params, "user_id": user_id},
            )
        )

    def abort(self, request_id: str) -> bool:
        """Asks the child to end the request after its current step; True once asked (it may have ended already)."""
        try:
            self._send(("abort", request_id))
        except EngineDied:
            return False
        return True

    def _send(self, command: tuple) -> None:
        if self._closed:
            raise EngineDied("the engine process was closed")
        try:
            with self._send_lock:
                self._commands.send(command)
        except (OSError, ValueError) as exc:  # BrokenPipeError: the child is gone
            raise EngineDied(f"the engine process is gone ({self._exit_description()})") from exc

    # --- outputs (from the worker's engine thread) ----------------------------------------------------------------
    def wait_for_work(self, timeout: float | None = None) -> bool:
        """True when the child has sent something (outputs, or its end); waits up to `timeout` otherwise."""
        try:
            return self._outputs.poll(timeout)
        except (OSError, ValueError):  # closed by close()
            return True

    def step(self) -> list[RequestOutput]:
        """The next batch of outputs the child sent; raises EngineDied when it has ended."""
        kind, payload = self._receive(None)
        if kind == "outputs":
            return payload
        if kind == "step_error":
            raise RuntimeError(f"the engine's step failed: {payload}")
        raise EngineDied(f"the engine process sent an unexpected {kind!r} message")

    def _receive(self, timeout: float | None) -> tuple[str, Any] | None:
        try:
            if timeout is not None and not self._outputs.poll(timeout):
                return None
            return self._outputs.recv()
        except (EOFError, OSError, ValueError) as exc:
            raise EngineDied(f"the engine process ended ({self._exit_description()})") from exc

    def _exit_description(self) -> str:
        self._process.join(1)
        code = self._process.exitcode
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    # --- lifecycle -------------------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        """Asks the child to end, waits up to `timeout`, then kills it. Safe to call twice."""
        if not self._closed:
            try:
                with self._send_lock:
                    self._commands.send(("stop", None))
            except (OSError, ValueError):
                pass
            self._closed = True
            self._commands.close()
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        self._outputs.close()


# --- the child ---------------------------------------------------------------------------------------------------
def serve(model: str, options: dict, commands, outputs) -> None:
    """The child's main: load the engine, say "ready" (or why not), then step while there is work and take
    commands between steps. Runs until "stop" or until the worker's end of the commands pipe closes."""
    # Ctrl-C reaches the whole process group: the worker shuts down on it and then stops this child in turn
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.current_thread().name = ENGINE_THREAD_NAME
    set_native_thread_name(ENGINE_THREAD_NAME)
    try:
        from inference.engine import LLMEngine

        engine = LLMEngine(model, **options)
    except Exception as exc:  # any load failure is the worker's to report; the child just says why
        outputs.send(("failed", f"cannot load model {model!r}: {exc}"))
        return
    outputs.send(("ready", {"max_model_len": engine.max_model_len}))
    refused: list[RequestOutput] = []
    while True:
        busy = engine.wait_for_work(0) or bool(refused)
        try:
            if commands.poll(0 if busy else CHILD_IDLE_WAIT_S):
                while True:
                    if not _apply(engine, commands.recv(), refused):
                        return
                    if not commands.poll(0):
                        break
        except (EOFError, OSError):  # the worker is gone
            return
        news, refused = refused, []
        if engine.wait_for_work(0):
            try:
                news.extend(engine.step())
            # the engine ends a failing step's requests itself; this is the last resort
            except Exception as exc:
                log.exception("engine step failed")
                outputs.send(("step_error", f"{type(exc).__name__}: {exc}"))
        if news:
            try:
                outputs.send(("outputs", news))
            except OSError:  # the worker is gone
                return


def _apply(engine, command: tuple, refused: list[RequestOutput]) -> bool:
    """Carries out one command; False for "stop"."""
    kind, request_id, *rest = command
    if kind == "stop":
        return False
    if kind == "abort":
        engine.abort(request_id)
    elif kind == "add":
        try:
            engine.add_request(request_id, **rest[0])
        except (ValueError, TypeError) as exc:  # the engine's own validation: the backstop for context length
            refused.append(refusal(request_id, exc))
    return True


def refusal(request_id: str, reason: Exception) -> RequestOutput:
    """The output that ends a request the engine would not take (add_request raised `reason`)."""
    return RequestOutput(
        request_id=request_id,
        delta_text="",
        new_token_ids=[],
        finished=True,
        finish_reason="error",
        num_prompt_tokens=0,
        num_cached_prompt_tokens=0,
        num_output_tokens=0,
        error=f"The request was refused by the model: {reason}",
    )
