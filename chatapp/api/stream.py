"""Answer a submitted generation: as one JSON completion, or as OpenAI's server-sent-event stream.

A client that goes away (Daphne reports the disconnect, Django cancels the view or closes the stream) has its
generation cancelled at once, so its batch slot is freed for others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from chatapp.api import config, database
from chatapp.api.errors import ApiError
from chatapp.api.follow import GenerationFollower, RowSnapshot
from chatapp.api.shapes import SSE_DONE, Envelope, Usage, sse
from chatapp.api.submit import generation_abandon
from chatapp.models import ApiKey, Generation
from chatapp.notify import send_cancel

log = logging.getLogger(__name__)
_background: set[asyncio.Task] = set()


async def _cancel(api_key: ApiKey, generation_id) -> None:
    channel = await database.run(generation_abandon, api_key=api_key, generation_id=generation_id)
    if channel:
        await send_cancel(channel, generation_id)


async def cancel_abandoned(api_key: ApiKey, generation_id) -> None:
    """Cancels the generation even while the calling task is itself being cancelled."""
    task = asyncio.ensure_future(_cancel(api_key, generation_id))
    _background.add(task)
    task.add_done_callback(_background.discard)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        pass  # the task carries on and finishes the cancel
    except Exception:
        log.exception("cancelling abandoned generation %s failed", generation_id)


def usage_of(row: RowSnapshot) -> Usage:
    return Usage(row.prompt_tokens, row.completion_tokens, row.cached_prompt_tokens)


def failure(row: RowSnapshot) -> ApiError:
    return ApiError(500, row.error or "The generation failed.", type="server_error", code="generation_failed")


async def complete(*, api_key: ApiKey, generation: Generation, envelope: Envelope) -> tuple[int, dict]:
    """Waits for the generation to end; returns (status, body) of the whole completion."""
    async with GenerationFollower(generation.id, poll_seconds=config.API_STREAM_POLL_SECONDS) as follower:
        try:
            async for _piece in follower.pieces():
                pass
        except BaseException:  # the client left (the view was cancelled) or the stream broke
            await cancel_abandoned(api_key, generation.id)
            raise
    row = follower.final
    if row.state == Generation.State.FAILED:
        err = failure(row)
        return err.status, err.body()
    return 200, envelope.completion(row.text, row.finish_reason, usage_of(row))


async def stream(
    *, api_key: ApiKey, generation: Generation, envelope: Envelope, include_usage: bool
) -> AsyncIterator[bytes]:
    """The SSE body: a role chunk (chat), text chunks, the finish chunk, the usage chunk if asked, [DONE]."""
    async with GenerationFollower(generation.id, poll_seconds=config.API_STREAM_POLL_SECONDS) as follower:
        try:
            if envelope.kind == "chat":
                yield sse(envelope.chunk("", role=True, with_usage=include_usage))
            async for piece in follower.pieces():
                yield sse(envelope.chunk(piece, with_usage=include_usage))
        except BaseException:  # the client left (Django closes the stream) or the stream broke
            await cancel_abandoned(api_key, generation.id)
            raise
    row = follower.final
    if row.state == Generation.State.FAILED:
        yield sse(failure(row).body())
    else:
        text = None if envelope.kind == "chat" else ""
        yield sse(envelope.chunk(text, row.finish_reason or "stop", with_usage=include_usage))
        if include_usage:
            yield sse(envelope.usage_chunk(usage_of(row)))
    yield SSE_DONE
