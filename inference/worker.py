"""The inference worker: claims queued Generation rows, drives one LLMEngine, streams deltas over Redis.

One asyncio loop does all I/O (Redis channel layer, database through `database_sync_to_async`); the engine steps in
a process of its own (inference.engine_process; in tests, a thread), and a thread (inference.stepper) hands its
outputs to the loop. Concurrent tasks:
- receive: the worker's own channel gets nudges (via WORKERS_GROUP) and cancels; they only wake things up.
- claim: on a nudge, a freed slot or every sweep interval: fail expired leases (any worker's, of this model),
  claim the oldest queued rows that fit (capacity minus running), add them to the engine, send `started` and new
  queue positions.
- flush: coalesces each generation's new text (first text at once, then at most one delta per flush interval),
  checkpoints every due generation in one transaction, and only then sends the deltas and `done` events: a chat
  answer's to its conversation's group, API requests' as one relay batch per web process (chatapp.api.relay).
- heartbeat: renews this worker's row and the leases of its running generations every lease/3 seconds.
The database is the truth; a lost nudge is found by the sweep, a lost cancel by the flag read at each checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable

from channels import DEFAULT_CHANNEL_LAYER
from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.layers import channel_layers
from django.conf import settings

from chatapp import selectors, services
from chatapp.models import Generation, Worker
from inference import messages
from inference.engine_process import EngineDied, refusal
from inference.live import LiveGeneration
from inference.stepper import EngineStepper
from inference.threadnames import set_native_thread_name

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 30.0  # longest wait for a loop to finish its current database call when stopping
ENGINE_DIED_ERROR = "The model's process stopped while writing this answer; the answer was interrupted."
STEPPER_JOIN_S = 30.0  # longest wait for the engine thread to finish its current step when stopping


class InferenceWorker:
    """Serves queued generations with `engine` until `stop()`: an inference.engine_process.EngineProcess, or an
    inference.engine.LLMEngine stepped in a thread of this process (tests share one that way)."""

    def __init__(
        self,
        engine,
        *,
        model_name: str,
        is_demo: bool,
        max_context: int,
        capacity: int,
        flush_interval: float | None = None,
        sweep_interval: float | None = None,
        heartbeat_interval: float | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.engine = engine
        self.model_name = model_name
        self.is_demo = is_demo
        self.max_context = max_context
        self.capacity = capacity
        self.flush_interval = (
            flush_interval if flush_interval is not None else settings.WORKER_FLUSH_MS / 1000
        )
        self.sweep_interval = sweep_interval if sweep_interval is not None else settings.WORKER_SWEEP_SECONDS
        self.heartbeat_interval = heartbeat_interval or settings.WORKER_LEASE_SECONDS / 3
        # A layer object of its own: channels_redis lets one layer object receive on one process-local channel
        # prefix at a time, so sharing the web side's (as in in-process tests) would starve its consumers.
        self.layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        self.live: dict[str, LiveGeneration] = {}
        self.row: Worker | None = None
        self.channel_name: str | None = None
        self.ready = asyncio.Event()  # set once registered and listening (tests wait on it)
        self._stop = asyncio.Event()
        self._claim_wakeup = asyncio.Event()
        self._flush_wakeup = asyncio.Event()
        self._positions_sent: dict[uuid.UUID, int] = {}
        self._last_expiry = float("-inf")  # monotonic time of the last lease sweep
        self._stepper: EngineStepper | None = None
        self.engine_failure: BaseException | None = None  # set when the engine process died under this worker

    # --- lifecycle --------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Asks the loops to finish their current step (never cut off mid-transaction) and shut down."""
        self._stop.set()
        self._claim_wakeup.set()
        self._flush_wakeup.set()

    async def run(self) -> None:
        """Registers, serves until stop(), then fails what it was writing and deregisters."""
        # The one thread database_sync_to_async uses, named for `top -H` and bench/api.py's CPU accounting.
        await database_sync_to_async(set_native_thread_name)("worker-db")
        self.channel_name = await self.layer.new_channel(prefix=messages.WORKER_CHANNEL_PREFIX)
        await self.layer.group_add(messages.WORKERS_GROUP, self.channel_name)
        self.row = await database_sync_to_async(services.worker_register)(
            channel_name=self.channel_name,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            model=self.model_name,
            is_demo=self.is_demo,
            max_context=self.max_context,
            capacity=self.capacity,
        )
        loop = asyncio.get_running_loop()
        self._stepper = EngineStepper(
            self.engine,
            loop=loop,
            has_work=lambda: any(not g.finished for g in list(self.live.values())),
            on_outputs=self._on_outputs,
            on_step_error=self._on_step_error,
        )
        self._stepper.start()
        tasks = [
            asyncio.create_task(self._receive_loop(), name="worker-receive"),
            asyncio.create_task(self._claim_loop(), name="worker-claim"),
            asyncio.create_task(self._flush_loop(), name="worker-flush"),
            asyncio.create_task(self._heartbeat_loop(), name="worker-heartbeat"),
        ]
        log.info("worker %s ready: model %s, capacity %d", self.row.id, self.model_name, self.capacity)
        self.ready.set()
        stop_task = asyncio.create_task(self._stop.wait())
        try:
            done, _ = await asyncio.wait([stop_task, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stop_task and task.exception() is not None:
                    raise task.exception()
        finally:
            self.stop()
            # The receive loop only waits on Redis: cancel it. The others end at their next check of the stop
            # flag; cancelling them could cut a checkpoint transaction off from the events that follow it.
            tasks[0].cancel()
            _done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
            for task in (*pending, stop_task):
                task.cancel()
            try:
                await asyncio.gather(*tasks, stop_task, return_exceptions=True)
                await self._shutdown()
            finally:
                # However run() ends (even cancelled mid-shutdown), the engine thread ends with it: the engine
                # may be handed to another worker next, and two threads must never step it.
                if self._stepper is not None and self._stepper.alive:
                    self._stepper.stop(STEPPER_JOIN_S)

    @property
    def engine_thread_alive(self) -> bool:
        """True while this worker's engine thread runs (it ends when run() returns)."""
        return self._stepper is not None and self._stepper.alive

    async def _shutdown(self) -> None:
        for live in list(self.live.values()):
            self._abort_in_engine(live.generation_id)
        if self._stepper is not None and not await asyncio.to_thread(self._stepper.stop, STEPPER_JOIN_S):
            log.error("the engine thread did not end within %.0f s", STEPPER_JOIN_S)
        failed = await database_sync_to_async(services.worker_stop)(worker=self.row)
        await self._send_done_events([g.id for g in failed])
        self.live.clear()
        try:
            await self.layer.group_discard(messages.WORKERS_GROUP, self.channel_name)
        except Exception:  # Redis may be gone already; the group entry then expires by itself
            log.warning("could not leave the workers group", exc_info=True)
        with contextlib.suppress(Exception):
            await self.layer.close_pools()

    # --- engine outputs (called on the loop by the stepper thread) ------------------------------------------------
    def _on_outputs(self, outputs: list) -> None:
        for out in outputs:
            live = self.live.get(out.request_id)
            if live is not None:
                live.apply_output(out)
        self._flush_wakeup.set()

    def _on_step_error(self, exc: BaseException) -> None:
        died = isinstance(exc, EngineDied)
        for live in self.live.values():
            if not live.finished:
                if not died:
                    self._abort_in_engine(live.generation_id)
                live.finish("error", error=ENGINE_DIED_ERROR if died else _step_error(exc))
        self._flush_wakeup.set()
        if died:  # no engine, no work: the answers above get their checkpoint as the worker stops
            self.engine_failure = exc
            self.stop()

    def _abort_in_engine(self, request_id: str) -> None:
        try:
            self.engine.abort(request_id)
        except Exception:  # an unknown or already finished request is fine
            log.debug("abort of %s ignored", request_id, exc_info=True)

    def _cancel(self, generation_id: str) -> None:
        live = self.live.get(generation_id)
        if live is None or live.finished:
            return
        self._abort_in_engine(generation_id)
        live.finish("abort")
        self._flush_wakeup.set()

    # --- receive ---------------------------------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        while True:
            try:
                raw = await self.layer.receive(self.channel_name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("channel layer receive failed; retrying", exc_info=True)
                await asyncio.sleep(1)
                continue
            try:
                message = messages.parse_worker_message(raw)
            except messages.MessageFormatError as exc:
                log.warning("ignored a malformed worker message: %s", exc)
                continue
            if isinstance(message, messages.JobCancel):
                self._cancel(message.generation_id)
            else:
                self._claim_wakeup.set()

    # --- claim and sweep -------------------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        while not self._stop.is_set():
            await _wait(self._claim_wakeup, self.sweep_interval)
            if self._stop.is_set():
                return
            try:
                await self._sweep_and_claim()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("claim/sweep failed; retrying at the next sweep")

    async def _sweep_and_claim(self) -> None:
        """Claims what fits, expires dead workers' leases once per sweep interval, and updates queue positions.

        A nudge comes with every request, and on a busy machine each trip to the database thread waits for a core:
        the claim and the queue read share one, and the lease sweep (its own trip, its `done` events sent before the
        claim can fail) runs only once per sweep interval.
        """
        now = time.monotonic()
        if now - self._last_expiry >= self.sweep_interval:
            expired = await database_sync_to_async(services.generation_expire_leases)(model=self.model_name)
            self._last_expiry = now
            if expired:
                log.warning("failed %d generations whose worker lease expired", len(expired))
                await self._send_done_events([g.id for g in expired])
        claimed, queued = await database_sync_to_async(self._claim_round)(self.capacity - len(self.live))
        for row in claimed:
            await self._start(row)
        if claimed and self._stepper is not None:
            self._stepper.wake()
        await self._send_positions(queued)

    def _claim_round(self, room: int) -> tuple[list[Generation], list]:
        """(claimed, queued) in the database thread. The queue is read only when it may hold rows: a claim that
        took fewer than it had room for left nothing queued for this model."""
        claimed = services.generation_claim(worker=self.row, limit=room)
        if len(claimed) < room and not self._positions_sent:
            return claimed, []
        return claimed, selectors.queued_generations(model=self.model_name, limit=settings.CHAT_QUEUE_MAX)

    async def _start(self, row: Generation) -> None:
        gid = str(row.id)
        live = LiveGeneration(
            generation_id=gid,
            group=_group_for(row.conversation_id, row.source),
            created_at_epoch=row.created_at.timestamp(),
            reply_channel=row.reply_channel,
        )
        self.live[gid] = live
        if live.group:  # an API client has nothing to show for `started`
            await self._send(live.group, messages.started_event(gid))
        try:
            self.engine.add_request(
                gid, params=_sampling_params(row.params), user_id=str(row.user_id), **row.prompt
            )
        except (ValueError, TypeError) as exc:  # the engine's own validation: the backstop for context length
            live.apply_output(refusal(gid, exc))  # (an engine process sends the same as an output instead)
            self._flush_wakeup.set()

    async def _send_positions(self, queued: list) -> None:
        positions: dict[uuid.UUID, int] = {}
        for position, (gid, conversation_id, source) in enumerate(queued, start=1):
            positions[gid] = position
            group = _group_for(conversation_id, source)
            if group and self._positions_sent.get(gid) != position:
                await self._send(group, messages.queued_event(gid, position))
        self._positions_sent = positions

    # --- flush -----------------------------------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            due_times = [
                t for t in (g.due_at(self.flush_interval) for g in self.live.values()) if t is not None
            ]
            if not due_times:
                await self._flush_wakeup.wait()
                self._flush_wakeup.clear()
                continue
            wait = min(due_times) - now
            if wait > 0:
                await _wait(self._flush_wakeup, wait)
                continue
            await self._flush(now)

    async def _flush(self, now: float) -> None:
        due = [g for g in self.live.values() if (t := g.due_at(self.flush_interval)) is not None and t <= now]
        checkpoints, deltas = [], []
        for live in due:
            pending = live.pending_text
            seq = live.seq + 1 if pending else live.seq
            checkpoints.append(
                services.Checkpoint(
                    generation_id=uuid.UUID(live.generation_id),
                    text=live.text,
                    seq=seq,
                    final_state=live.final_state,
                    finish_reason=live.finish_reason,
                    error=live.error,
                    stats=live.stats(),
                )
            )
            deltas.append((live, seq, len(live.text), pending, live.finished))
        active = [uuid.UUID(gid) for gid, g in self.live.items() if not g.finished]
        result = await database_sync_to_async(services.generation_checkpoint)(
            worker=self.row, checkpoints=checkpoints, active_ids=active
        )
        finished_ids, sends = [], []
        relay_batches: dict[str, list[dict]] = {}
        for live, seq, length, pending, finished in deltas:
            gid = uuid.UUID(live.generation_id)
            if gid in result.lost:  # someone else failed it (expired lease): stop and say nothing more
                self._abort_in_engine(live.generation_id)
                self.live.pop(live.generation_id, None)
                continue
            live.seq, live.sent_len, live.last_flush = seq, length, now
            if live.reply_channel:  # an API request: its events go in its web process's batch
                batch = relay_batches.setdefault(live.reply_channel, [])
                if pending:
                    batch.append(messages.relay_delta(gid, seq, pending))
                if finished:
                    batch.append(messages.relay_done(gid))  # the row already holds how it ended
            elif pending and live.group:
                sends.append(self._send(live.group, messages.delta_event(gid, seq, pending)))
            if finished:
                live.done_sent = True
                self.live.pop(live.generation_id, None)
                if not live.reply_channel:
                    finished_ids.append(gid)
        sends.extend(self._send_relay(channel, events) for channel, events in relay_batches.items())
        # One message per stream or web process per flush, so sending them concurrently keeps each stream in
        # order while the Redis round trips overlap instead of queueing one behind another.
        await asyncio.gather(*sends)
        for gid in result.cancel:
            self._cancel(str(gid))
        if finished_ids:
            await self._send_done_events(finished_ids)
        if any(finished for *_, finished in deltas):
            self._claim_wakeup.set()  # slots freed

    # --- heartbeat -------------------------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.heartbeat_interval)
            if self._stop.is_set():
                return
            try:
                await database_sync_to_async(services.worker_heartbeat)(
                    worker=self.row, running=len(self.live)
                )
                await self.layer.group_add(messages.WORKERS_GROUP, self.channel_name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("heartbeat failed; retrying")

    # --- sending ---------------------------------------------------------------------------------------------
    async def _send_done_events(self, ids: Iterable[uuid.UUID]) -> None:
        """`done` for generations that ended outside a flush's checkpoint, or for chat answers (which carry the
        final generation object, read from their rows)."""
        ids = list(ids)
        if not ids:
            return
        data = await database_sync_to_async(selectors.generations_data)(ids=ids)
        relay_batches: dict[str, list[dict]] = {}
        for gid in ids:
            if gid not in data:
                continue
            source, reply_channel, generation = data[gid]
            if reply_channel:
                relay_batches.setdefault(reply_channel, []).append(messages.relay_done(gid))
            elif group := _group_for(generation["conversation_id"], source):
                await self._send(group, messages.done_event(generation))
        for channel, events in relay_batches.items():
            await self._send_relay(channel, events)

    async def _send(self, group: str, event: dict) -> None:
        """Sends one event to a group; Redis trouble costs the event (clients resync from the row), not the job."""
        try:
            await self.layer.group_send(group, messages.client_event(event))
        except ChannelFull:
            log.warning("channel full: dropped a %s event for %s", event.get("type"), group)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("could not send a %s event to %s", event.get("type"), group, exc_info=True)

    async def _send_relay(self, channel: str, events: list[dict]) -> None:
        """Sends a web process its API requests' events of this flush in one message (same failure rule)."""
        if not events:
            return
        try:
            await self.layer.send(channel, messages.relay_batch(events))
        except ChannelFull:  # that process is gone or stuck; its followers read their rows
            log.warning("relay channel full: dropped %d events for %s", len(events), channel)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("could not send %d events to %s", len(events), channel, exc_info=True)


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Waits until `event` is set or `timeout` passes, then clears it."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=timeout)
    event.clear()


def _step_error(exc: BaseException) -> str:
    return f"The model failed while writing this answer ({type(exc).__name__})."


def _group_for(conversation_id, source) -> str | None:
    """A chat answer's events go to its conversation's group; an API request's to its relay channel instead."""
    if conversation_id and source != Generation.Source.API:
        return messages.conversation_group(conversation_id)
    return None


def _sampling_params(params: dict):
    from inference.engine import SamplingParams

    return SamplingParams(**params)
