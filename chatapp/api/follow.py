"""Follow one generation's text as it is made: deltas from its channel-layer group, the database row as truth.

channels_redis is at-most-once, so a delta can be lost. Deltas carry consecutive `seq` numbers and the worker
checkpoints the row's text before sending each one, so on a gap (or a quiet spell) the row holds everything up to
its `seq`; the follower then takes the missing text from the row and carries on with the deltas after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from chatapp.models import Generation
from inference.messages import MessageFormatError, generation_group, unwrap_client_event

POLL_SECONDS = 1.0


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


read_row = sync_to_async(_read_row, thread_sensitive=False)


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

    async def __aenter__(self) -> GenerationFollower:
        self._channel = await self._layer.new_channel(prefix="api-follow")
        await self._layer.group_add(self._group, self._channel)
        return self

    async def __aexit__(self, *exc) -> None:
        with contextlib.suppress(Exception):  # Redis trouble on the way out must not mask the real outcome
            await self._layer.group_discard(self._group, self._channel)

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
        receiving = asyncio.ensure_future(self._layer.receive(self._channel))
        try:
            while True:
                done, _ = await asyncio.wait({receiving}, timeout=self.poll_seconds)
                event = None
                if done:
                    message = receiving.result()
                    receiving = asyncio.ensure_future(self._layer.receive(self._channel))
                    try:
                        event = unwrap_client_event(message)
                    except MessageFormatError:
                        continue
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
                elif event is not None and event.get("type") not in ("done",):
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
        finally:
            receiving.cancel()
            with contextlib.suppress(BaseException):
                await receiving
