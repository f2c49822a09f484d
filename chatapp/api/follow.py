"""Follow one generation's text as it is made: deltas from its channel-layer group, the database row as truth.

channels_redis is at-most-once, so a delta can be lost. Deltas carry consecutive `seq` numbers and the worker
checkpoints the row's text before sending each one, so on a gap (or a quiet spell) the row holds everything up to
its `seq`; the follower then takes the missing text from the row and carries on with the deltas after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from chatapp.models import Generation
from inference.messages import MessageFormatError, generation_group, unwrap_client_event

POLL_SECONDS = 1.0
DRAIN_SECONDS = 5.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowSnapshot:
    """What the follower needs from the row: the text checkpointed up to `seq`, and how it ended."""

    text: str
    seq: int
    state: str
    finish_reason: str
    error: str
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int

    @property
    def is_final(self) -> bool:
        return self.state in Generation.FINAL_STATES


def _read_row(generation_id) -> RowSnapshot:
    row = Generation.objects.get(id=generation_id)
    return RowSnapshot(
        text=row.text,
        seq=row.seq,
        state=row.state,
        finish_reason=row.finish_reason,
        error=row.error,
        prompt_tokens=row.prompt_tokens or 0,
        completion_tokens=row.completion_tokens or 0,
        cached_prompt_tokens=row.cached_prompt_tokens or 0,
    )


read_row = database_sync_to_async(_read_row)


class GenerationFollower:
    """Yields a generation's new text in order, exactly once; `final` holds the ended row afterwards."""

    def __init__(self, generation_id, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.generation_id = generation_id
        self.poll_seconds = poll_seconds
        self.final: RowSnapshot | None = None
        self.resyncs = 0  # how often text had to be taken from the row (a lost or late delta)
        self._sent = 0  # characters yielded so far
        self._seq = 0  # last delta applied
        self._layer = get_channel_layer()
        self._group = generation_group(generation_id)
        self._channel: str | None = None
        self._receiving: asyncio.Future | None = None

    async def __aenter__(self) -> GenerationFollower:
        self._channel = await self._layer.new_channel(prefix="api-follow")
        await self._layer.group_add(self._group, self._channel)
        return self

    async def __aexit__(self, *exc) -> None:
        with contextlib.suppress(Exception):  # Redis trouble on the way out must not mask the real outcome
            await self._layer.group_discard(self._group, self._channel)
        await self._drain()

    def _receive(self) -> asyncio.Future:
        if self._receiving is None:
            self._receiving = asyncio.ensure_future(self._layer.receive(self._channel))
        return self._receiving

    async def _drain(self) -> None:
        """Ends the pending receive by sending our own channel an end marker, and reads up to it.

        Never cancels a receive: cancelling a pending channels_redis receive was seen to leave it running (and the
        request hanging) with channels_redis 4.3 and redis-py 8. Reading up to the marker also empties what the
        group sent us before we left it, so nothing stays buffered for a channel nobody reads.
        """
        marker = uuid.uuid4().hex
        try:
            await self._layer.send(self._channel, {"type": "api.follow.end", "marker": marker})
        except Exception:
            log.warning("could not end the stream's receive cleanly", exc_info=True)
            return
        deadline = time.monotonic() + DRAIN_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            receiving = self._receive()
            done, _ = await asyncio.wait({receiving}, timeout=left)
            if not done:
                break
            self._receiving = None
            if receiving.exception() is not None or receiving.result().get("marker") == marker:
                return
        log.warning("the end marker of %s did not come back within %ss", self._channel, DRAIN_SECONDS)

    def _from_row(self, row: RowSnapshot) -> str:
        """The row's text past what was already yielded (the row holds every delta up to its seq)."""
        if row.seq < self._seq:
            return ""
        piece = row.text[self._sent :]
        self._sent = len(row.text)
        self._seq = row.seq
        return piece

    async def pieces(self) -> AsyncIterator[str]:
        """New text pieces until the generation ends (subscribed first, then the row, so nothing is missed)."""
        row = await read_row(self.generation_id)
        if piece := self._from_row(row):
            yield piece
        if row.is_final:
            self.final = row
            return
        while True:
            done, _ = await asyncio.wait({self._receive()}, timeout=self.poll_seconds)
            event = None
            if done:
                receiving, self._receiving = self._receiving, None
                try:
                    event = unwrap_client_event(receiving.result())
                except MessageFormatError:
                    continue
                except Exception:  # Redis trouble: the row still has everything; poll it until it is back
                    log.warning("receive failed on %s; reading the row instead", self._channel, exc_info=True)
                    await asyncio.sleep(self.poll_seconds)
            if event is not None and event.get("type") == "delta":
                seq = event.get("seq")
                if not isinstance(seq, int) or seq <= self._seq:
                    continue
                if seq == self._seq + 1 and isinstance(event.get("text"), str):
                    self._seq = seq
                    self._sent += len(event["text"])
                    if event["text"]:
                        yield event["text"]
                    continue
            elif event is not None and event.get("type") != "done":
                continue  # queued / started: nothing to show an OpenAI client
            # A gap, the end, or a quiet spell: the row decides.
            row = await read_row(self.generation_id)
            if row.seq > self._seq:
                self.resyncs += 1
            if piece := self._from_row(row):
                yield piece
            if row.is_final:
                self.final = row
                return
