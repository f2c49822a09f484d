"""Rows -> the JSON objects of docs/protocol.md (conversation, message, generation)."""

from __future__ import annotations

from typing import Any

from chatapp.models import Conversation, Generation, Message


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def conversation_summary(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "created_at": _iso(conversation.created_at),
        "updated_at": _iso(conversation.updated_at),
    }


def conversation_data(conversation: Conversation) -> dict[str, Any]:
    return {
        **conversation_summary(conversation),
        "system_prompt": conversation.system_prompt,
        "params": dict(conversation.params or {}),
    }


def generation_data(
    generation: Generation, *, position: int | None = None, message_id: int | None = None
) -> dict[str, Any]:
    """The protocol's generation object; `position` only while queued."""
    if message_id is None:
        message = getattr(generation, "message", None) if _has_message(generation) else None
        message_id = message.id if message is not None else None
    return {
        "id": str(generation.id),
        "conversation_id": str(generation.conversation_id) if generation.conversation_id else None,
        "message_id": message_id,
        "state": generation.state,
        "text": generation.text,
        "seq": generation.seq,
        "finish_reason": generation.finish_reason or None,
        "error": generation.error or None,
        "position": position if generation.state == Generation.State.QUEUED else None,
        "stats": {
            "prompt_tokens": generation.prompt_tokens,
            "cached_prompt_tokens": generation.cached_prompt_tokens,
            "completion_tokens": generation.completion_tokens,
            "ttft_ms": generation.ttft_ms,
            "tokens_per_s": generation.tokens_per_s,
        },
    }


def _has_message(generation: Generation) -> bool:
    try:
        generation.message  # noqa: B018 - reverse one-to-one raises when absent
    except Message.DoesNotExist:
        return False
    return True


def message_data(message: Message) -> dict[str, Any]:
    """An assistant message shows its generation's text until the answer is final."""
    generation = message.generation
    content = message.content
    if generation is not None and not generation.is_final:
        content = generation.text
    return {
        "id": message.id,
        "role": message.role,
        "content": content,
        "created_at": _iso(message.created_at),
        "generation": generation_data(generation, message_id=message.id) if generation is not None else None,
    }
