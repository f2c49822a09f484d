"""The worker's per-flush checkpoint: batched writes that keep each row's ownership check, on the real database."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chatapp import services
from chatapp.models import Conversation, Generation, Message
from chatapp.services import LEASE_EXPIRED_ERROR, Checkpoint

MODEL = "checkpoint-test-model"
STATS = {
    "prompt_tokens": 12,
    "cached_prompt_tokens": 4,
    "completion_tokens": 7,
    "ttft_ms": 35.5,
    "tokens_per_s": 21.25,
}


@pytest.fixture
def make_worker(db):
    def make(name: str = "w"):
        return services.worker_register(
            channel_name=f"inference-worker.{name}!x", hostname=name, pid=1, model=MODEL, is_demo=True,
            max_context=2048, capacity=32,
        )  # fmt: skip

    return make


@pytest.fixture
def running(db, make_worker):
    """`running(n)` -> (worker, [n generations it claimed, each with an assistant message])."""
    user = get_user_model().objects.create_user(username=f"u{uuid.uuid4().hex[:8]}", password="pw-123456")

    def make(n: int, worker=None):
        worker = worker or make_worker()
        conversation = Conversation.objects.create(user=user, title="t")
        for _ in range(n):
            generation = Generation.objects.create(
                user=user, conversation=conversation, model=MODEL, prompt={"prompt": "hi"}, params={}
            )
            Message.objects.create(conversation=conversation, role="assistant", generation=generation)
        claimed = services.generation_claim(worker=worker, limit=n)
        assert len(claimed) == n
        return worker, claimed

    return make


def checkpoint(worker, checkpoints, active_ids=()):
    return services.generation_checkpoint(worker=worker, checkpoints=checkpoints, active_ids=list(active_ids))


def row(generation) -> Generation:
    return Generation.objects.get(id=generation.id)


def test_executemany_rowcount_is_the_total_over_all_rows(running):
    """The fast path trusts this of sqlite3 and psycopg 3: one executemany's rowcount sums every row's."""
    _worker, rows = running(3)
    table = connection.ops.quote_name(Generation._meta.db_table)
    seq, pk = (connection.ops.quote_name(Generation._meta.get_field(n).column) for n in ("seq", "id"))
    pk_field = Generation._meta.pk
    params = [(5, pk_field.get_db_prep_value(g.id, connection)) for g in rows]
    params.append((5, pk_field.get_db_prep_value(uuid.uuid4(), connection)))  # matches no row
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {seq} = %s WHERE {pk} = %s", params)
        assert cursor.rowcount == 3


def test_many_rows_in_one_call_are_one_update_statement(running):
    worker, rows = running(16)
    cps = [
        Checkpoint(generation_id=g.id, text=f"text {i}", seq=i + 1, stats=STATS) for i, g in enumerate(rows)
    ]
    with CaptureQueriesContext(connection) as queries:
        result = checkpoint(worker, cps, active_ids=[g.id for g in rows])
    assert result.lost == set() and result.cancel == set()
    updates = [q["sql"] for q in queries.captured_queries if "UPDATE" in q["sql"]]
    assert len(updates) == 1, updates  # the fast path: no per-row retry
    for i, g in enumerate(rows):
        stored = row(g)
        assert (stored.text, stored.seq, stored.state) == (f"text {i}", i + 1, "running")
        assert stored.completion_tokens == 7 and stored.tokens_per_s == 21.25
        assert stored.lease_expires_at is not None and stored.finished_at is None


def test_stats_missing_from_a_checkpoint_keep_their_stored_values(running):
    worker, (a, b) = running(2)
    checkpoint(worker, [Checkpoint(generation_id=a.id, text="x", seq=1, stats=STATS)])
    # Different stat sets in one call: a carries none, b only some.
    result = checkpoint(
        worker,
        [
            Checkpoint(generation_id=a.id, text="xy", seq=2),
            Checkpoint(generation_id=b.id, text="z", seq=1, stats={"prompt_tokens": 3}),
        ],
    )
    assert result.lost == set()
    stored_a, stored_b = row(a), row(b)
    assert stored_a.text == "xy" and stored_a.seq == 2
    assert {k: getattr(stored_a, k) for k in STATS} == STATS
    assert stored_b.prompt_tokens == 3 and stored_b.ttft_ms is None and stored_b.completion_tokens is None


def test_a_finishing_row_gets_its_final_state_and_its_message(running):
    worker, (done, failed, still) = running(3)
    before = timezone.now()
    result = checkpoint(
        worker,
        [
            Checkpoint(generation_id=done.id, text="the end", seq=3, final_state="done", finish_reason="stop",
                       stats=STATS),
            Checkpoint(generation_id=failed.id, text="half", seq=1, final_state="failed", finish_reason="error",
                       error="The model failed."),
            Checkpoint(generation_id=still.id, text="going", seq=2),
        ],
        active_ids=[still.id],
    )  # fmt: skip
    assert result.lost == set()
    stored = row(done)
    assert (stored.state, stored.finish_reason, stored.error, stored.text) == ("done", "stop", "", "the end")
    assert stored.finished_at >= before and stored.lease_expires_at is None and stored.tokens_per_s == 21.25
    assert Message.objects.get(generation_id=done.id).content == "the end"
    stored = row(failed)
    assert (stored.state, stored.finish_reason, stored.error) == ("failed", "error", "The model failed.")
    assert stored.finished_at >= before and stored.lease_expires_at is None
    assert Message.objects.get(generation_id=failed.id).content == "half"
    stored = row(still)
    assert stored.state == "running" and stored.finished_at is None and stored.lease_expires_at is not None
    assert Message.objects.get(generation_id=still.id).content == ""


def test_rows_failed_or_taken_by_someone_else_are_lost_and_left_alone(running, make_worker):
    worker, (expired, taken, stopped, kept, finishing, lost_finishing) = running(6)
    cps = [Checkpoint(generation_id=g.id, text="partial", seq=1) for g in (expired, taken, stopped)]
    checkpoint(worker, cps)
    # A sweep expires one lease; another worker holds the second; the third was stopped meanwhile.
    Generation.objects.filter(id__in=[expired.id, lost_finishing.id]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert {g.id for g in services.generation_expire_leases(model=MODEL)} == {expired.id, lost_finishing.id}
    Generation.objects.filter(id=taken.id).update(worker=make_worker("other"))
    Generation.objects.filter(id=stopped.id).update(state="stopped", finish_reason="abort")

    result = checkpoint(
        worker,
        [
            *(Checkpoint(generation_id=g.id, text="overwritten?", seq=2, stats=STATS)
              for g in (expired, taken, stopped, kept)),
            Checkpoint(generation_id=finishing.id, text="fin", seq=1, final_state="done", finish_reason="stop"),
            Checkpoint(generation_id=lost_finishing.id, text="fin", seq=1, final_state="done",
                       finish_reason="stop"),
        ],
        active_ids=[expired.id, taken.id, stopped.id, kept.id],
    )  # fmt: skip
    assert result.lost == {expired.id, taken.id, stopped.id, lost_finishing.id}
    for g, state in ((expired, "failed"), (taken, "running"), (stopped, "stopped")):
        stored = row(g)
        assert (stored.text, stored.seq, stored.state) == ("partial", 1, state)
        assert stored.prompt_tokens is None
    stored = row(expired)
    assert (
        stored.error == LEASE_EXPIRED_ERROR
        and Message.objects.get(generation_id=expired.id).content == "partial"
    )
    stored = row(lost_finishing)
    assert (stored.state, stored.error, stored.text) == ("failed", LEASE_EXPIRED_ERROR, "")
    assert Message.objects.get(generation_id=lost_finishing.id).content == ""
    # The rows still owned were written in the same call.
    assert row(kept).text == "overwritten?" and row(kept).completion_tokens == 7
    assert row(finishing).state == "done" and Message.objects.get(generation_id=finishing.id).content == "fin"


def test_cancel_flags_come_back_for_active_rows(running):
    worker, (flagged, plain, idle) = running(3)
    for g in (flagged, idle):
        _row, channel = services.generation_cancel(user=g.user, generation_id=g.id)
        assert channel == worker.channel_name
    result = checkpoint(
        worker,
        [Checkpoint(generation_id=g.id, text="a", seq=1) for g in (flagged, plain)],
        active_ids=[flagged.id, plain.id, idle.id],  # idle has nothing to write this flush
    )
    assert result.cancel == {flagged.id, idle.id} and result.lost == set()
    assert row(flagged).text == "a"  # a flagged row is still the worker's until it stops it


@pytest.mark.parametrize(
    "text",
    [
        "it's \"quoted\"; -- not SQL'); DROP TABLE chatapp_generation; --",
        "%s %(name)s %% ? :1 $1 \\ backslash",
        "héllo wörld, 世界, emoji 🎉🧪, combining é, RTL עברית",
        "line\nbreaks\ttabs\r\n" + "long " * 40_000,
    ],
    ids=["quotes", "placeholders", "unicode", "long"],
)
def test_text_round_trips(running, text):
    worker, (g,) = running(1)
    assert checkpoint(worker, [Checkpoint(generation_id=g.id, text=text, seq=1)]).lost == set()
    assert row(g).text == text
    checkpoint(
        worker, [Checkpoint(generation_id=g.id, text=text, seq=2, final_state="done", finish_reason="stop")]
    )
    assert row(g).text == text and Message.objects.get(generation_id=g.id).content == text


def test_an_empty_flush_writes_nothing(running):
    worker, (g,) = running(1)
    assert checkpoint(worker, [], active_ids=[]) == services.CheckpointResult()
    assert row(g).seq == 0
