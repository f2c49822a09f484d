"""One channel per web process for the API's token stream: the workers send it one batch per flush, not a message
per request per flush, and it hands each event to the follower of that request in this process.

With one Redis message per stream per flush, 16 concurrent requests cost 16 channel-layer sends in the worker and
16 receives here every engine step; batched, the Redis cost of a flush no longer grows with the number of streams.
Redis remains at-most-once: a lost batch shows as a gap in a follower's `seq` and the row fills it (chatapp.api.follow).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref

from channels.layers import get_channel_layer

from inference import messages

log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0
STOP_TYPE = "api.relay.stop"
STOP_WAIT_SECONDS = 5.0


class DeltaRelay:
    """Receives relay batches on this process's channel and queues each event for its generation's follower.

    It receives only while some request follows a generation. A pending channels_redis receive must never be
    cancelled (that was seen to leave it hanging, and with it a closing event loop), so when the last follower
    leaves, the relay sends its own channel a stop message and its receive loop ends by itself.
    """

    def __init__(self) -> None:
        self._layer = get_channel_layer()
        self._channel: str | None = None
        self._task: asyncio.Task | None = None
        self._queues: dict[str, asyncio.Queue[messages.RelayEvent]] = {}

    async def channel_name(self) -> str:
        """The channel workers send this process's API events to."""
        if self._channel is None:
            # The default prefix, like the consumers' channels: channels_redis has one receive lock per process
            # and its holder pops only its own prefix's key, so a second prefix would starve the other receivers.
            self._channel = await self._layer.new_channel()
        return self._channel

    @property
    def receiving(self) -> bool:
        """True while the receive loop runs (while some request follows a generation, and a moment after)."""
        return self._task is not None and not self._task.done()

    async def subscribe(self, generation_id: uuid.UUID | str) -> asyncio.Queue[messages.RelayEvent]:
        """A queue of this generation's events from now on (earlier ones are in its row)."""
        await self.channel_name()
        queue: asyncio.Queue[messages.RelayEvent] = asyncio.Queue()
        self._queues[str(generation_id)] = queue
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._receive_loop(), name="api-relay")
        return queue

    async def unsubscribe(self, generation_id: uuid.UUID | str) -> None:
        """Stops queueing this generation's events; the last one out ends the receive loop and waits for it."""
        self._queues.pop(str(generation_id), None)
        task = self._task
        if self._queues or task is None or task.done():
            return
        try:
            await self._layer.send(self._channel, {"type": STOP_TYPE})
        except Exception:  # Redis trouble: the loop is retrying and ends at its next turn without followers
            log.warning("could not stop the relay's receive on %s", self._channel, exc_info=True)
            return
        await asyncio.wait({task}, timeout=STOP_WAIT_SECONDS)  # waits, never cancels

    async def _receive_loop(self) -> None:
        while self._queues:
            try:
                message = await self._layer.receive(self._channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis trouble: followers poll their rows meanwhile
                log.warning("relay receive on %s failed; retrying", self._channel, exc_info=True)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            if isinstance(message, dict) and message.get("type") == STOP_TYPE:
                continue  # ends the loop unless a follower came meanwhile
            try:
                events = messages.parse_relay_batch(message)
            except messages.MessageFormatError as exc:
                log.warning("ignored a malformed relay message: %s", exc)
                continue
            for event in events:
                queue = self._queues.get(event.generation_id)
                if queue is not None:  # else its request ended: drop it
                    queue.put_nowait(event)


_relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DeltaRelay] = weakref.WeakKeyDictionary()


def get_relay() -> DeltaRelay:
    """This process's relay (one per event loop: Daphne has one; tests may run several in turn)."""
    loop = asyncio.get_running_loop()
    relay = _relays.get(loop)
    if relay is None:
        relay = _relays[loop] = DeltaRelay()
    return relay
