"""Reads: every query the consumers, views and worker make that does not change rows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from chatapp.models import Conversation, Generation, Message, Worker
from chatapp.prompt_check import model_max_context


def workers_alive(*, model: str | None = None) -> list[Worker]:
    """Workers whose heartbeat is younger than one lease (only those serving `model`, when given)."""
    cutoff = timezone.now() - timedelta(seconds=settings.WORKER_LEASE_SECONDS)
    workers = Worker.objects.filter(last_heartbeat__gte=cutoff, stopped_at__isnull=True)
    if model is not None:
        workers = workers.filter(model=model)
    return list(workers.order_by("-started_at"))


def _as_uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


def conversation_get(*, user, conversation_id) -> Conversation | None:
    """The user's conversation with that id, or None (also for another user's: callers answer not_found)."""
    key = _as_uuid(conversation_id)
    if key is None:
        return None
    return Conversation.objects.filter(id=key, user=user).first()


def conversation_list(*, user, limit: int = 200) -> list[Conversation]:
    """The user's conversations, most recently updated first."""
    return list(Conversation.objects.filter(user=user).order_by("-updated_at")[:limit])


def conversation_messages(*, conversation: Conversation) -> list[Message]:
    return list(conversation.messages.select_related("generation").order_by("created_at", "id"))


def generation_get(*, user, generation_id) -> Generation | None:
    """The user's generation with that id, or None (also for another user's)."""
    key = _as_uuid(generation_id)
    if key is None:
        return None
    return Generation.objects.filter(id=key, user=user).select_related("message").first()


def queue_positions(*, model: str, limit: int | None = None) -> dict[uuid.UUID, int]:
    """1-based position of every generation queued for `model`, oldest first (the order workers claim them)."""
    ids = Generation.objects.filter(state=Generation.State.QUEUED, model=model).order_by("created_at", "id")
    ids = ids.values_list("id", flat=True)
    if limit is not None:
        ids = ids[:limit]
    return {gid: index for index, gid in enumerate(ids, start=1)}


def queue_position(*, generation: Generation) -> int | None:
    """This generation's 1-based place in the queue, or None when it is not queued."""
    if generation.state != Generation.State.QUEUED:
        return None
    ahead = Generation.objects.filter(
        state=Generation.State.QUEUED, model=generation.model, created_at__lt=generation.created_at
    ).count()
    return ahead + 1


@dataclass(frozen=True)
class ModelInfo:
    """The model answers come from: a live worker's, else the configured one."""

    name: str
    is_demo: bool
    max_context: int | None
    alive: bool

    @property
    def max_tokens_limit(self) -> int:
        if self.max_context:
            return max(1, min(settings.CHAT_MAX_TOKENS, self.max_context - 1))
        return settings.CHAT_MAX_TOKENS

    @property
    def display_name(self) -> str:
        """A hub id as is; a local folder by its last component (server paths are nobody's business)."""
        if self.name.startswith(("/", ".", "~")) or "\\" in self.name:
            return self.name.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
        return self.name

    def as_data(self) -> dict:
        return {"name": self.display_name, "is_demo": self.is_demo, "max_context": self.max_context}


def current_model() -> ModelInfo:
    """The model this web process queues answers for (LLM_MODEL), as its live workers describe it."""
    workers = workers_alive(model=settings.LLM_MODEL)
    if workers:
        worker = workers[0]
        return ModelInfo(worker.model, worker.is_demo, worker.max_context or None, True)
    return ModelInfo(
        settings.LLM_MODEL, settings.LLM_MODEL_IS_DEMO, model_max_context(settings.LLM_MODEL), False
    )


def queued_generations(*, model: str, limit: int) -> list[tuple[uuid.UUID, uuid.UUID | None, str]]:
    """(id, conversation id, source) of the oldest generations queued for `model`, in claim order."""
    rows = (
        Generation.objects.filter(state=Generation.State.QUEUED, model=model)
        .order_by("created_at", "id")
        .values_list("id", "conversation_id", "source")[:limit]
    )
    return list(rows)


def generations_data(*, ids) -> dict[uuid.UUID, tuple[str, str, dict]]:
    """(source, reply channel, protocol generation object) for these ids (any user: for the worker's `done`
    events)."""
    from chatapp.serializers import generation_data

    rows = Generation.objects.filter(id__in=list(ids)).select_related("message")
    return {row.id: (row.source, row.reply_channel, generation_data(row)) for row in rows}
