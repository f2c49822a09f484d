"""Follow one generation's text as it is made: events from this process's relay, the database row as truth.

channels_redis is at-most-once, so a delta can be lost. Deltas carry consecutive `seq` numbers and the worker
checkpoints the row's text before sending each one, so on a gap (or a quiet spell) the row holds everything up to
its `seq`; the follower then takes the missing text from the row and carries on with the deltas after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from chatapp.api import database
from chatapp.api.relay import get_relay
from chatapp.models import Generation
from inference.messages import RelayEvent

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


async def read_row(generation_id) -> RowSnapshot:
    return await database.run(_read_row, generation_id)


class GenerationFollower:
    """Yields a generation's new text in order, exactly once; `final` holds the ended row afterwards.

    The generation's row must name this process's relay channel (chatapp.api.relay) for events to reach it; without
    them it still works, by reading the row every `poll_seconds`.
    """

    def __init__(self, generation_id, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.generation_id = generation_id
        self.poll_seconds = poll_seconds
        self.final: RowSnapshot | None = None
        self.resyncs = 0  # how often text had to be taken from the row (a lost or late delta)
        self._sent = 0  # characters yielded so far
        self._seq = 0  # last delta applied
        self._relay = get_relay()
        self._events: asyncio.Queue[RelayEvent] | None = None
        self._held: RelayEvent | None = None  # taken from the queue while coalescing, not applied yet

    async def __aenter__(self) -> GenerationFollower:
        self._events = await self._relay.subscribe(self.generation_id)
        return self

    async def __aexit__(self, *exc) -> None:
        await self._relay.unsubscribe(self.generation_id)

    def _from_row(self, row: RowSnapshot) -> str:
        """The row's text past what was already yielded (the row holds every delta up to its seq)."""
        if row.seq < self._seq:
            return ""
        piece = row.text[self._sent :]
        self._sent = len(row.text)
        self._seq = row.seq
        return piece

    async def _next_event(self) -> RelayEvent | None:
        """The next event, or None after `poll_seconds` without one."""
        if self._held is not None:
            event, self._held = self._held, None
            return event
        if not self._events.empty():  # wait_for costs a task and a timer: only when there is nothing yet
            return self._events.get_nowait()
        try:
            return await asyncio.wait_for(self._events.get(), self.poll_seconds)
        except TimeoutError:
            return None

    def _apply(self, event: RelayEvent) -> str:
        self._seq = event.seq
        self._sent += len(event.text)
        return event.text

    def _apply_queued(self) -> str:
        """The text of the deltas already queued right after the last one applied, as one piece.

        While this process is busy, a stream's deltas pile up; sending them as one chunk costs one write instead of
        several. Stops at anything else (a gap, `done`), which is held for the loop's next turn.
        """
        texts = []
        while self._held is None and not self._events.empty():
            event = self._events.get_nowait()
            if event.done or event.seq != self._seq + 1:
                self._held = event
            else:
                texts.append(self._apply(event))
        return "".join(texts)

    async def pieces(self) -> AsyncIterator[str]:
        """New text pieces until the generation ends (subscribed first, then the row, so nothing is missed)."""
        row = await read_row(self.generation_id)
        if piece := self._from_row(row):
            yield piece
        if row.is_final:
            self.final = row
            return
        while True:
            event = await self._next_event()
            if event is not None and not event.done:
                if event.seq <= self._seq:
                    continue  # already taken from the row
                if event.seq == self._seq + 1:
                    text = self._apply(event) + self._apply_queued()
                    if text:
                        yield text
                    continue
            # A gap, the end, or a quiet spell: the row decides.
            row = await read_row(self.generation_id)
            if row.seq > self._seq:
                self.resyncs += 1
            if piece := self._from_row(row):
                yield piece
            if row.is_final:
                self.final = row
                return
