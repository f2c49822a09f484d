"""Writes: the only code that creates or changes conversations, messages, generations and worker rows.

Keyword-only functions with greppable names (`chat_send`, `generation_cancel`, `generation_claim`, ...). Each runs
in one transaction and raises chatapp.errors.ApplicationError subclasses for anything the user must be told.
They are synchronous (Django ORM); async callers wrap them with `database_sync_to_async`. Channel-layer sends
(nudges, events) are the caller's job, after the transaction committed (see chatapp.notify).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from chatapp.errors import BadField, Busy, NotFound
from chatapp.models import Conversation, Generation, Message, Worker
from chatapp.prompt_check import check_prompt_fits
from chatapp.selectors import ModelInfo, conversation_get, current_model, generation_get, queue_position
from chatapp.validation import validate_content, validate_params, validate_system_prompt, validate_title

State = Generation.State
TITLE_CHARS = 60
LEASE_EXPIRED_ERROR = (
    "The inference worker handling this answer stopped responding; the answer was interrupted."
)
WORKER_STOPPED_ERROR = (
    "The inference worker was shut down while writing this answer; the answer was interrupted."
)


# --- limits -----------------------------------------------------------------------------------------------------
def _check_user_limits(*, user) -> None:
    """A chat user's concurrent answers and message rate; raises Busy with a retry hint."""
    # Serialises one user's requests on PostgreSQL (SQLite already serialises writers).
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    active = Generation.objects.filter(user=user, state__in=Generation.ACTIVE_STATES).count()
    if active >= settings.CHAT_MAX_CONCURRENT_PER_USER:
        raise Busy(
            f"you already have {active} answers being written (the limit is "
            f"{settings.CHAT_MAX_CONCURRENT_PER_USER}); wait for one to finish or cancel it",
            retry_after=2,
        )
    now = timezone.now()
    window = list(
        Generation.objects.filter(user=user, created_at__gte=now - timedelta(seconds=60))
        .order_by("created_at")
        .values_list("created_at", flat=True)[: settings.CHAT_RATE_PER_MINUTE]
    )
    if len(window) >= settings.CHAT_RATE_PER_MINUTE:
        wait = (window[0] + timedelta(seconds=60) - now).total_seconds()
        raise Busy(
            f"at most {settings.CHAT_RATE_PER_MINUTE} messages a minute; try again shortly",
            retry_after=max(1, math.ceil(wait)),
        )


def _check_queue_bound() -> None:
    """The bound on answers waiting for this model, for chat and API alike; raises Busy with a retry hint."""
    queued = Generation.objects.filter(state=State.QUEUED, model=settings.LLM_MODEL).count()
    if queued >= settings.CHAT_QUEUE_MAX:
        raise Busy("the server is busy (the queue is full); try again shortly", retry_after=5)


# --- generations (chat and API) ---------------------------------------------------------------------------------
def _sampling_kwargs(params: dict) -> dict:
    """Conversation params -> SamplingParams keyword arguments, with the defaults filled in."""
    kwargs = {"max_tokens": settings.CHAT_DEFAULT_MAX_TOKENS}
    kwargs.update(params)
    return kwargs


def generation_create(
    *,
    user,
    prompt: dict,
    params: dict,
    source: str = Generation.Source.CHAT,
    conversation: Conversation | None = None,
    api_key=None,
    reply_channel: str = "",
    model: ModelInfo | None = None,
) -> Generation:
    """Queues one answer after the limits and the context check; `params` are SamplingParams kwargs.

    Chat answers count against the user's concurrency and rate limits; API requests are limited per key by the
    API's own code. Both count against the queue bound (CHAT_QUEUE_MAX).

    Call inside a transaction together with whatever else the request writes, then nudge the workers. `model` is
    current_model() when the caller already has it (a query saved).
    """
    if not isinstance(prompt, dict) or not (("messages" in prompt) ^ ("prompt" in prompt)):
        raise BadField("prompt must hold either messages or prompt", field="prompt")
    max_tokens = params.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadField("max_tokens must be an integer >= 1", field="params.max_tokens")
    if source == Generation.Source.CHAT:
        _check_user_limits(user=user)  # API requests are limited per key by the API instead
    _check_queue_bound()
    model = model or current_model()
    check_prompt_fits(model=model.name, max_context=model.max_context, prompt=prompt, max_tokens=max_tokens)
    return Generation.objects.create(
        user=user,
        conversation=conversation,
        source=source,
        api_key=api_key,
        model=model.name,
        state=State.QUEUED,
        prompt=prompt,
        params=params,
        reply_channel=reply_channel,
    )


def _finish_message(*, generation_id, text: str) -> None:
    Message.objects.filter(generation_id=generation_id).update(content=text)


def generation_cancel(*, user, generation_id) -> tuple[Generation, str | None]:
    """Stops a queued answer at once, or flags a running one; returns (row, worker channel to tell or None).

    The caller sends inference.messages.job_cancel to the returned channel; the flag is the backstop the worker
    also reads at every checkpoint.
    """
    with transaction.atomic():
        generation = generation_get(user=user, generation_id=generation_id)
        if generation is None:
            raise NotFound("generation", field="generation_id")
        if generation.is_final:
            return generation, None
        now = timezone.now()
        stopped = Generation.objects.filter(id=generation.id, state=State.QUEUED).update(
            state=State.STOPPED, cancel_requested=True, finish_reason="abort", finished_at=now
        )
        if stopped:
            _finish_message(generation_id=generation.id, text=generation.text)
            generation.refresh_from_db()
            return generation, None
        Generation.objects.filter(id=generation.id).update(cancel_requested=True)
        generation.refresh_from_db()
        channel = generation.worker.channel_name if generation.worker_id and generation.worker else None
        return generation, channel


# --- chat -------------------------------------------------------------------------------------------------------
@dataclass
class ChatResult:
    """What a send or regenerate wrote, for the events the consumer sends."""

    conversation: Conversation
    generation: Generation
    assistant_message: Message
    position: int | None
    user_message: Message | None = None
    conversation_changed: bool = False
    replaced_message_id: int | None = None


def _history_prompt(conversation: Conversation) -> dict:
    """The conversation as chat messages for the engine: system prompt, then every finished turn."""
    messages = []
    if conversation.system_prompt:
        messages.append({"role": "system", "content": conversation.system_prompt})
    for message in conversation.messages.select_related("generation").order_by("created_at", "id"):
        if message.role == Message.Role.ASSISTANT:
            if message.generation is not None and not message.generation.is_final:
                continue
            if not message.content:
                continue
        messages.append({"role": message.role, "content": message.content})
    return {"messages": messages}


def _queue_answer(*, user, conversation: Conversation) -> tuple[Generation, Message]:
    generation = generation_create(
        user=user,
        conversation=conversation,
        prompt=_history_prompt(conversation),
        params=_sampling_kwargs(conversation.params or {}),
    )
    assistant = Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, generation=generation
    )
    conversation.save(update_fields=["updated_at"])
    return generation, assistant


def _owned_conversation(*, user, conversation_id) -> Conversation:
    """The user's conversation, or NotFound (also for another user's id, so nothing reveals it exists)."""
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    if conversation is None:
        raise NotFound("conversation", field="conversation_id")
    return conversation


def chat_send(
    *,
    user,
    conversation_id,
    content,
    system_prompt=None,
    params=None,
) -> ChatResult:
    """Appends a user message (creating the conversation when `conversation_id` is None) and queues an answer."""
    content = validate_content(content)
    system_prompt = validate_system_prompt(system_prompt)
    params = validate_params(params, max_tokens_limit=current_model().max_tokens_limit)
    with transaction.atomic():
        changed = False
        if conversation_id is None:
            conversation = Conversation.objects.create(
                user=user,
                title=content.strip()[:TITLE_CHARS],
                system_prompt=system_prompt or "",
                params=params or {},
            )
            changed = True
        else:
            conversation = _owned_conversation(user=user, conversation_id=conversation_id)
            changed = _apply_settings(conversation=conversation, system_prompt=system_prompt, params=params)
        user_message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, content=content
        )
        generation, assistant = _queue_answer(user=user, conversation=conversation)
        return ChatResult(
            conversation=conversation,
            generation=generation,
            assistant_message=assistant,
            position=queue_position(generation=generation),
            user_message=user_message,
            conversation_changed=changed,
        )


def chat_regenerate(*, user, conversation_id) -> ChatResult:
    """Replaces the conversation's last answer by a new one made from the same history."""
    with transaction.atomic():
        conversation = _owned_conversation(user=user, conversation_id=conversation_id)
        last = conversation.messages.select_related("generation").order_by("-created_at", "-id").first()
        if last is None:
            raise BadField("the conversation has no message to answer", field="conversation_id")
        replaced = None
        if last.role == Message.Role.ASSISTANT:
            if last.generation is not None and not last.generation.is_final:
                raise Busy("the last answer is still being written; cancel it first", retry_after=1)
            replaced = last.id
            last.delete()
        generation, assistant = _queue_answer(user=user, conversation=conversation)
        return ChatResult(
            conversation=conversation,
            generation=generation,
            assistant_message=assistant,
            position=queue_position(generation=generation),
            replaced_message_id=replaced,
        )


def _apply_settings(*, conversation: Conversation, system_prompt: str | None, params: dict | None) -> bool:
    fields = []
    if system_prompt is not None and system_prompt != conversation.system_prompt:
        conversation.system_prompt = system_prompt
        fields.append("system_prompt")
    if params is not None:
        merged = {**(conversation.params or {}), **params}
        if merged != conversation.params:
            conversation.params = merged
            fields.append("params")
    if fields:
        conversation.save(update_fields=[*fields, "updated_at"])
    return bool(fields)


def conversation_settings_update(*, user, conversation_id, system_prompt=None, params=None) -> Conversation:
    """Changes the system prompt and/or sampling settings used by later answers."""
    system_prompt = validate_system_prompt(system_prompt)
    params = validate_params(params, max_tokens_limit=current_model().max_tokens_limit)
    with transaction.atomic():
        conversation = _owned_conversation(user=user, conversation_id=conversation_id)
        _apply_settings(conversation=conversation, system_prompt=system_prompt, params=params)
        return conversation


def conversation_rename(*, user, conversation_id, title) -> Conversation:
    title = validate_title(title)
    with transaction.atomic():
        conversation = _owned_conversation(user=user, conversation_id=conversation_id)
        conversation.title = title
        conversation.save(update_fields=["title", "updated_at"])
        return conversation


def conversation_delete(*, user, conversation_id) -> list[tuple[uuid.UUID, str]]:
    """Deletes a conversation after stopping its answers; returns (generation id, worker channel) to cancel."""
    with transaction.atomic():
        conversation = _owned_conversation(user=user, conversation_id=conversation_id)
        to_cancel = []
        for generation in conversation.generations.filter(state__in=Generation.ACTIVE_STATES):
            _row, channel = generation_cancel(user=user, generation_id=generation.id)
            if channel:
                to_cancel.append((generation.id, channel))
        conversation.delete()
        return to_cancel


# --- workers ----------------------------------------------------------------------------------------------------
def worker_register(
    *, channel_name: str, hostname: str, pid: int, model: str, is_demo: bool, max_context: int, capacity: int
) -> Worker:
    return Worker.objects.create(
        channel_name=channel_name,
        hostname=hostname,
        pid=pid,
        model=model,
        is_demo=is_demo,
        max_context=max_context,
        capacity=capacity,
        last_heartbeat=timezone.now(),
    )


def worker_heartbeat(*, worker: Worker, running: int) -> None:
    """Marks the worker alive and renews the lease of every answer it is writing."""
    now = timezone.now()
    with transaction.atomic():
        updated = Worker.objects.filter(id=worker.id).update(
            last_heartbeat=now, running=running, stopped_at=None
        )
        if not updated:  # the row was removed (say, by an admin): put it back so health and hello see us
            worker.last_heartbeat = now
            worker.running = running
            worker.save(force_insert=True)
        Generation.objects.filter(worker_id=worker.id, state=State.RUNNING).update(
            lease_expires_at=now + timedelta(seconds=settings.WORKER_LEASE_SECONDS)
        )


def worker_stop(*, worker: Worker) -> list[Generation]:
    """Marks the worker stopped and fails the answers it was writing (they cannot be resumed elsewhere)."""
    now = timezone.now()
    with transaction.atomic():
        Worker.objects.filter(id=worker.id).update(stopped_at=now, running=0)
        ids = list(
            Generation.objects.filter(worker_id=worker.id, state=State.RUNNING).values_list("id", flat=True)
        )
        return _fail(ids=ids, error=WORKER_STOPPED_ERROR, now=now)


def _fail(*, ids, error: str, now) -> list[Generation]:
    if not ids:
        return []
    Generation.objects.filter(id__in=ids, state=State.RUNNING).update(
        state=State.FAILED, error=error, finish_reason="error", finished_at=now, lease_expires_at=None
    )
    rows = list(Generation.objects.filter(id__in=ids, state=State.FAILED))
    for row in rows:
        _finish_message(generation_id=row.id, text=row.text)
    return rows


def generation_claim(*, worker: Worker, limit: int) -> list[Generation]:
    """Atomically moves up to `limit` of the oldest rows queued for this worker's model to running, under its lease.

    A worker takes only answers queued for the model it serves (web processes queue for their LLM_MODEL).
    """
    if limit <= 0:
        return []
    now = timezone.now()
    with transaction.atomic():
        candidates = (
            Generation.objects.select_for_update(skip_locked=True)
            .filter(state=State.QUEUED, model=worker.model)
            .order_by("created_at", "id")
            .values_list("id", flat=True)[:limit]
        )
        ids = list(candidates)
        if not ids:
            return []
        Generation.objects.filter(id__in=ids, state=State.QUEUED).update(
            state=State.RUNNING,
            worker_id=worker.id,
            started_at=now,
            lease_expires_at=now + timedelta(seconds=settings.WORKER_LEASE_SECONDS),
        )
        return list(
            Generation.objects.filter(
                id__in=ids, worker_id=worker.id, state=State.RUNNING, started_at=now
            ).order_by("created_at", "id")
        )


@dataclass
class Checkpoint:
    """One generation's progress to save: its whole text so far, its seq, and, when it ended, how."""

    generation_id: uuid.UUID
    text: str
    seq: int
    final_state: str | None = None
    finish_reason: str = ""
    error: str = ""
    stats: dict = field(default_factory=dict)  # prompt_tokens, cached_prompt_tokens, completion_tokens, ...


@dataclass
class CheckpointResult:
    lost: set = field(default_factory=set)  # ids this worker no longer owns (lease expired, taken away)
    cancel: set = field(
        default_factory=set
    )  # ids whose cancel flag is set (a cancel message may have been lost)


STAT_FIELDS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "ttft_ms", "tokens_per_s")


def generation_checkpoint(*, worker: Worker, checkpoints: list[Checkpoint], active_ids) -> CheckpointResult:
    """Saves a tick's progress of every generation in one transaction (before the deltas are sent).

    The worker calls this every engine step, so the rows are written with one executemany per column set rather
    than one ORM update each. Each row's UPDATE still requires this worker's ownership and the running state;
    when the total row count falls short (a lease expired, a row was taken away: rare), the transaction is
    rolled back and done again row by row to learn which rows were lost.
    """
    now = timezone.now()
    try:
        return _checkpoint(
            worker=worker, checkpoints=checkpoints, active_ids=active_ids, now=now, batched=True
        )
    except _RowsLost:
        return _checkpoint(
            worker=worker, checkpoints=checkpoints, active_ids=active_ids, now=now, batched=False
        )


class _RowsLost(Exception):
    """A batched checkpoint updated fewer rows than it was given."""


def _checkpoint(*, worker: Worker, checkpoints, active_ids, now, batched: bool) -> CheckpointResult:
    result = CheckpointResult()
    with transaction.atomic():
        connection = transaction.get_connection()
        groups: dict[tuple[str, ...], list[tuple[Checkpoint, list]]] = {}
        for cp in checkpoints:
            values = _checkpoint_values(cp, now)
            owned = {"id": cp.generation_id, "worker": worker.id, "state": State.RUNNING}  # _update_sql WHERE
            params = [_db_value(connection, k, v) for k, v in (*values.items(), *owned.items())]
            groups.setdefault(tuple(values), []).append((cp, params))
        with connection.cursor() as cursor:
            for names, rows in groups.items():
                sql = _update_sql(connection, names)
                if batched:
                    cursor.executemany(sql, [params for _cp, params in rows])
                    if cursor.rowcount != len(rows):  # sqlite3 and psycopg sum executemany's row counts
                        raise _RowsLost  # leaves the atomic block, rolling back what this call wrote
                    continue
                for cp, params in rows:
                    cursor.execute(sql, params)
                    if not cursor.rowcount:
                        result.lost.add(cp.generation_id)
            result.cancel = _cancel_flags(connection, cursor, active_ids)
        for cp in checkpoints:
            if cp.final_state is not None and cp.generation_id not in result.lost:
                _finish_message(generation_id=cp.generation_id, text=cp.text)
    return result


def _checkpoint_values(cp: Checkpoint, now) -> dict:
    """Field name -> value to write; the stats in STAT_FIELDS order, so equal key sets group together."""
    values = {"text": cp.text, "seq": cp.seq}
    values.update({k: cp.stats[k] for k in STAT_FIELDS if k in cp.stats})
    if cp.final_state is not None:
        values.update(
            state=cp.final_state,
            finish_reason=cp.finish_reason,
            error=cp.error,
            finished_at=now,
            lease_expires_at=None,
        )
    return values


def _update_sql(connection, names: tuple[str, ...]) -> str:
    """UPDATE setting `names` on one generation row this worker owns and that is still running (the ORM's
    query compilation cost more than the write, once per row per flush)."""
    sets = ", ".join(f"{_column(connection, name)} = %s" for name in names)
    where = " AND ".join(f"{_column(connection, name)} = %s" for name in ("id", "worker", "state"))
    return f"UPDATE {_table(connection)} SET {sets} WHERE {where}"


def _cancel_flags(connection, cursor, active_ids) -> set[uuid.UUID]:
    """Which of the running `active_ids` have their cancel flag set."""
    ids = [_db_value(connection, "id", i) for i in active_ids]
    if not ids:
        return set()
    pk, flag, state = (_column(connection, name) for name in ("id", "cancel_requested", "state"))
    cursor.execute(
        f"SELECT {pk} FROM {_table(connection)} WHERE {flag} = %s AND {state} = %s "
        f"AND {pk} IN ({', '.join(['%s'] * len(ids))})",
        [
            _db_value(connection, "cancel_requested", True),
            _db_value(connection, "state", State.RUNNING),
            *ids,
        ],
    )
    return {Generation._meta.pk.to_python(value) for (value,) in cursor.fetchall()}


def _table(connection) -> str:
    return connection.ops.quote_name(Generation._meta.db_table)


def _column(connection, name: str) -> str:
    return connection.ops.quote_name(Generation._meta.get_field(name).column)


def _db_value(connection, name: str, value):
    """`value` adapted by the field as the ORM would (UUIDs, booleans and datetimes differ per backend)."""
    return Generation._meta.get_field(name).get_db_prep_value(value, connection)


def generation_expire_leases(*, model: str) -> list[Generation]:
    """Fails every running answer of `model` whose worker stopped renewing its lease; returns them for notification.

    Like claiming, this is the job of the workers that serve `model`: a worker of another pool (maybe another
    deployment, with a Redis of its own, on the same database) would send the `done` events where no client of
    this model's web processes listens.
    """
    now = timezone.now()
    with transaction.atomic():
        ids = list(
            Generation.objects.select_for_update(skip_locked=True)
            .filter(state=State.RUNNING, model=model, lease_expires_at__lt=now)
            .values_list("id", flat=True)
        )
        return _fail(ids=ids, error=LEASE_EXPIRED_ERROR, now=now)
