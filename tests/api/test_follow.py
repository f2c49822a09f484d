"""GenerationFollower and the process's relay against a real Redis and database: deltas in order, a lost delta or a
lost `done` made good from the row, one batch feeding several requests. The test plays the worker's part through the
worker's own services and message formats."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model

from chatapp import services
from chatapp.api.follow import GenerationFollower
from chatapp.api.relay import get_relay
from chatapp.models import Generation
from inference import messages

pytestmark = pytest.mark.django_db(transaction=True)
WAIT_S = 60.0  # a guard against hanging, never an assertion about speed


class WorkerPart:
    """Checkpoints then sends, in that order, as inference.worker does."""

    def __init__(self) -> None:
        self.user = get_user_model().objects.create_user("follower")
        self.worker = services.worker_register(
            channel_name="test!",
            hostname="test",
            pid=1,
            model="m",
            is_demo=True,
            max_context=2048,
            capacity=4,
        )
        self.row = self.add_row()

    def add_row(self) -> Generation:
        row = Generation.objects.create(
            user=self.user, source="api", model="m", prompt={"prompt": "x"}, params={"max_tokens": 8}
        )
        assert services.generation_claim(worker=self.worker, limit=1)[0].id == row.id
        return row

    def checkpoint(self, text: str, seq: int, final: bool = False, row: Generation | None = None) -> None:
        cp = services.Checkpoint(
            generation_id=(row or self.row).id,
            text=text,
            seq=seq,
            final_state="done" if final else None,
            finish_reason="length" if final else "",
            stats={"prompt_tokens": 3, "completion_tokens": 8, "cached_prompt_tokens": 0},
        )
        services.generation_checkpoint(worker=self.worker, checkpoints=[cp], active_ids=[])


async def send(*events: dict) -> None:
    """One relay batch to this process's relay channel, as the worker sends it after a flush."""
    channel = await get_relay().channel_name()
    await get_channel_layer().send(channel, messages.relay_batch(list(events)))


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
    await send(messages.relay_delta(gid, 1, "Hello"))
    await send(messages.relay_delta(gid, 1, "Hello"))  # a duplicate is ignored
    await checkpoint("Hello wor", 2)  # its delta is lost in Redis
    await checkpoint("Hello world", 3)
    await send(messages.relay_delta(gid, 3, "ld"))  # the gap is seen here
    await checkpoint("Hello world!", 4, final=True)
    await send(messages.relay_delta(gid, 4, "!"), messages.relay_done(gid))
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
    await send(messages.relay_delta(gid, 2, " bird"), messages.relay_done(gid))
    pieces, _ = await asyncio.wait_for(task, WAIT_S)
    assert "".join(pieces) == "Early bird"


async def test_one_batch_feeds_each_request_its_own_events(part):
    first, second = part.row, await sync_to_async(part.add_row)()
    started_a, started_b = asyncio.Event(), asyncio.Event()
    task_a = asyncio.ensure_future(follow(first.id, started_a, poll_seconds=30))
    task_b = asyncio.ensure_future(follow(second.id, started_b, poll_seconds=30))
    await asyncio.wait_for(asyncio.gather(started_a.wait(), started_b.wait()), WAIT_S)
    await asyncio.sleep(0.1)  # let both read their (empty) rows
    checkpoint = sync_to_async(part.checkpoint)
    await checkpoint("one", 1, row=first)
    await checkpoint("two", 1, row=second)
    # An event for a request this process does not hold is dropped; the others arrive in order.
    await send(
        messages.relay_delta(first.id, 1, "one"),
        messages.relay_delta(uuid.uuid4(), 1, "nobody's"),
        messages.relay_delta(second.id, 1, "two"),
    )
    await checkpoint("one!", 2, final=True, row=first)
    await checkpoint("two?", 2, final=True, row=second)
    await send(
        messages.relay_delta(second.id, 2, "?"),
        messages.relay_delta(first.id, 2, "!"),
        messages.relay_done(first.id),
        messages.relay_done(second.id),
    )
    (pieces_a, follower_a), (pieces_b, follower_b) = await asyncio.wait_for(
        asyncio.gather(task_a, task_b), WAIT_S
    )
    assert pieces_a == ["one", "!"] and pieces_b == ["two", "?"]
    assert follower_a.resyncs == follower_b.resyncs == 0
    # The last follower out ended the relay's receive: nothing is left pending on the channel layer.
    assert not get_relay().receiving


async def test_deltas_that_pile_up_go_out_as_one_piece(part):
    """A busy web process finds several deltas of a stream queued at once: one chunk for them, not one each."""
    gid, started = part.row.id, asyncio.Event()
    task = asyncio.ensure_future(follow(gid, started, poll_seconds=30))
    await asyncio.wait_for(started.wait(), WAIT_S)
    await asyncio.sleep(0.1)  # let it read its (empty) row
    await sync_to_async(part.checkpoint)("Hello world!", 3, final=True)
    await send(
        messages.relay_delta(gid, 1, "Hello"),
        messages.relay_delta(gid, 2, " world"),
        messages.relay_delta(gid, 3, "!"),
        messages.relay_done(gid),
    )
    pieces, follower = await asyncio.wait_for(task, WAIT_S)
    assert pieces == ["Hello world!"] and follower.resyncs == 0


async def test_a_malformed_batch_is_skipped_and_the_relay_goes_on(part):
    gid, started = part.row.id, asyncio.Event()
    task = asyncio.ensure_future(follow(gid, started, poll_seconds=30))
    await asyncio.wait_for(started.wait(), WAIT_S)
    channel = await get_relay().channel_name()
    layer = get_channel_layer()
    await layer.send(
        channel, {"type": "api.relay", "events": [{"generation_id": "x", "seq": 1, "text": "a"}]}
    )
    await layer.send(channel, {"type": "something.else"})
    await sync_to_async(part.checkpoint)("fine", 1, final=True)
    await send(messages.relay_delta(gid, 1, "fine"), messages.relay_done(gid))
    pieces, follower = await asyncio.wait_for(task, WAIT_S)
    assert pieces == ["fine"] and follower.resyncs == 0


def test_relay_batches_are_validated():
    gid = uuid.uuid4()
    batch = messages.relay_batch([messages.relay_delta(gid, 3, "hi"), messages.relay_done(gid)])
    assert messages.parse_relay_batch(batch) == [
        messages.RelayEvent(str(gid), seq=3, text="hi"),
        messages.RelayEvent(str(gid), done=True),
    ]
    for bad in (
        {"type": "chat.event", "events": []},
        {"type": "api.relay", "events": "no"},
        messages.relay_batch(["no"]),
        messages.relay_batch([{"generation_id": "nope", "seq": 1, "text": ""}]),
        messages.relay_batch([{"generation_id": str(gid), "seq": 0, "text": ""}]),
        messages.relay_batch([{"generation_id": str(gid), "seq": True, "text": ""}]),
        messages.relay_batch([{"generation_id": str(gid), "seq": 1, "text": None}]),
    ):
        with pytest.raises(messages.MessageFormatError):
            messages.parse_relay_batch(bad)


def test_the_web_side_of_the_api_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import django, os, sys; os.environ['DJANGO_SETTINGS_MODULE'] = 'chatapp.settings'; django.setup();"
        "import chatapp.urls, chatapp.api.views, chatapp.api.stream, chatapp.api.admin;"
        "sys.exit(1 if {'torch', 'transformers'} & set(sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
