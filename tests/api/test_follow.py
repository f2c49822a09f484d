"""GenerationFollower against a real Redis and database: deltas in order, a lost delta or a lost `done` made good
from the row. The test plays the worker's part through the worker's own services and message formats."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model

from chatapp import services
from chatapp.api.follow import GenerationFollower
from chatapp.models import Generation
from inference import messages

pytestmark = pytest.mark.django_db(transaction=True)
WAIT_S = 60.0  # a guard against hanging, never an assertion about speed


class WorkerPart:
    """Checkpoints then sends, in that order, as inference.worker does."""

    def __init__(self) -> None:
        user = get_user_model().objects.create_user("follower")
        self.worker = services.worker_register(
            channel_name="test!",
            hostname="test",
            pid=1,
            model="m",
            is_demo=True,
            max_context=2048,
            capacity=4,
        )
        self.row = Generation.objects.create(
            user=user, source="api", model="m", prompt={"prompt": "x"}, params={"max_tokens": 8}
        )
        assert services.generation_claim(worker=self.worker, limit=1)[0].id == self.row.id

    def checkpoint(self, text: str, seq: int, final: bool = False) -> None:
        cp = services.Checkpoint(
            generation_id=self.row.id,
            text=text,
            seq=seq,
            final_state="done" if final else None,
            finish_reason="length" if final else "",
            stats={"prompt_tokens": 3, "completion_tokens": 8, "cached_prompt_tokens": 0},
        )
        services.generation_checkpoint(worker=self.worker, checkpoints=[cp], active_ids=[])


async def send(generation_id: uuid.UUID, event: dict) -> None:
    await get_channel_layer().group_send(
        messages.generation_group(generation_id), messages.client_event(event)
    )


async def follow(generation_id, started: asyncio.Event, **options) -> tuple[list[str], GenerationFollower]:
    pieces = []
    async with GenerationFollower(generation_id, **options) as follower:
        started.set()
        async for piece in follower.pieces():
            pieces.append(piece)
    return pieces, follower


@pytest.fixture
def part(redis_channel_layer):
    return WorkerPart()


async def test_a_lost_delta_is_taken_from_the_row(part):
    gid, started = part.row.id, asyncio.Event()
    task = asyncio.ensure_future(follow(gid, started, poll_seconds=30))
    await asyncio.wait_for(started.wait(), WAIT_S)
    checkpoint = sync_to_async(part.checkpoint)
    await checkpoint("Hello", 1)
    await send(gid, messages.delta_event(gid, 1, "Hello"))
    await send(gid, messages.delta_event(gid, 1, "Hello"))  # a duplicate is ignored
    await checkpoint("Hello wor", 2)  # its delta is lost in Redis
    await checkpoint("Hello world", 3)
    await send(gid, messages.delta_event(gid, 3, "ld"))  # the gap is seen here
    await checkpoint("Hello world!", 4, final=True)
    await send(gid, messages.delta_event(gid, 4, "!"))
    await send(gid, messages.done_event({"id": str(gid)}))
    pieces, follower = await asyncio.wait_for(task, WAIT_S)
    # The row may already hold more than the gap (the follower reads it when it notices): either way, exactly once.
    assert pieces[0] == "Hello" and "".join(pieces) == "Hello world!" and follower.resyncs == 1
    assert follower.final.text == "Hello world!" and follower.final.completion_tokens == 8


async def test_a_lost_done_is_found_by_polling_the_row(part):
    gid, started = part.row.id, asyncio.Event()
    task = asyncio.ensure_future(follow(gid, started, poll_seconds=0.05))
    await asyncio.wait_for(started.wait(), WAIT_S)
    await sync_to_async(part.checkpoint)("All of it", 1, final=True)  # neither delta nor done arrive
    pieces, follower = await asyncio.wait_for(task, WAIT_S)
    assert pieces == ["All of it"] and follower.final.state == "done"


async def test_text_written_before_subscribing_comes_from_the_row(part):
    gid, started = part.row.id, asyncio.Event()
    await sync_to_async(part.checkpoint)("Early", 1)
    task = asyncio.ensure_future(follow(gid, started, poll_seconds=30))
    await asyncio.wait_for(started.wait(), WAIT_S)
    await asyncio.sleep(0)  # let the follower read the row
    await sync_to_async(part.checkpoint)("Early bird", 2, final=True)
    await send(gid, messages.delta_event(gid, 2, " bird"))
    await send(gid, messages.done_event({"id": str(gid)}))
    pieces, _ = await asyncio.wait_for(task, WAIT_S)
    assert "".join(pieces) == "Early bird"


def test_the_web_side_of_the_api_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import django, os, sys; os.environ['DJANGO_SETTINGS_MODULE'] = 'chatapp.settings'; django.setup();"
        "import chatapp.urls, chatapp.api.views, chatapp.api.stream, chatapp.api.admin;"
        "sys.exit(1 if {'torch', 'transformers'} & set(sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
