"""Validation of user-supplied chat values (content, titles, system prompts, sampling params).

Each function returns the cleaned value or raises BadField / TooLong naming the field, so a bad frame is refused
before anything is written or queued.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings

from chatapp.errors import BadField, TooLong

TITLE_MAX_CHARS = 200
PARAM_NAMES = ("temperature", "top_p", "max_tokens")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def validate_content(value: Any) -> str:
    if not isinstance(value, str):
        raise BadField("content must be a string", field="content")
    if not value.strip():
        raise BadField("content must not be empty", field="content")
    if len(value) > settings.CHAT_MAX_MESSAGE_CHARS:
        raise TooLong(
            f"content is {len(value)} characters; the limit is {settings.CHAT_MAX_MESSAGE_CHARS}",
            field="content",
        )
    return value


def validate_title(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadField("title must be a non-empty string", field="title")
    value = value.strip()
    if len(value) > TITLE_MAX_CHARS:
        raise TooLong(f"title is {len(value)} characters; the limit is {TITLE_MAX_CHARS}", field="title")
    return value


def validate_system_prompt(value: Any) -> str | None:
    """None means "not given" (keep the current one); an empty string clears it."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadField("system_prompt must be a string", field="system_prompt")
    if len(value) > settings.CHAT_MAX_SYSTEM_PROMPT_CHARS:
        raise TooLong(
            f"system_prompt is {len(value)} characters; the limit is {settings.CHAT_MAX_SYSTEM_PROMPT_CHARS}",
            field="system_prompt",
        )
    return value


def validate_params(value: Any, *, max_tokens_limit: int) -> dict | None:
    """{"temperature": [0, 2], "top_p": (0, 1], "max_tokens": [1, max_tokens_limit]}, each optional."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadField("params must be an object", field="params")
    unknown = sorted(set(value) - set(PARAM_NAMES))
    if unknown:
        raise BadField(f"unknown params: {', '.join(map(str, unknown))}", field=f"params.{unknown[0]}")
    cleaned: dict = {}
    if "temperature" in value:
        t = value["temperature"]
        if not _is_number(t) or not 0 <= t <= 2:
            raise BadField("temperature must be a number in [0, 2]", field="params.temperature")
        cleaned["temperature"] = float(t)
    if "top_p" in value:
        p = value["top_p"]
        if not _is_number(p) or not 0 < p <= 1:
            raise BadField("top_p must be a number in (0, 1]", field="params.top_p")
        cleaned["top_p"] = float(p)
    if "max_tokens" in value:
        m = value["max_tokens"]
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= max_tokens_limit:
            raise BadField(
                f"max_tokens must be an integer in [1, {max_tokens_limit}]", field="params.max_tokens"
            )
        cleaned["max_tokens"] = m
    return cleaned
