"""Parsing and field checks of client frames (docs/protocol.md, "Client -> server").

A frame that fails here is answered with an `error` event; nothing is written or queued.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from chatapp.errors import BadField, BadJson, BadType, TooLong

CLIENT_TYPES = ("send", "list", "load", "rename", "delete", "settings", "cancel", "regenerate", "resume")
REQUEST_ID_MAX = 64


def max_frame_chars() -> int:
    """The largest frame worth parsing: a full message and system prompt, JSON-escaped, plus the rest."""
    return 6 * (settings.CHAT_MAX_MESSAGE_CHARS + settings.CHAT_MAX_SYSTEM_PROMPT_CHARS) + 4096


@dataclass
class Frame:
    type: str
    data: dict[str, Any]
    request_id: str | None


def has_nul(value: Any) -> bool:
    """Whether a parsed JSON value holds U+0000 in any string: PostgreSQL text cannot store it, so it is refused
    at the door rather than failing a write later."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def request_id_of(data: Any) -> str | None:
    """The frame's request_id when it is a valid one (so even a refused frame's error can echo it)."""
    if isinstance(data, dict):
        value = data.get("request_id")
        if isinstance(value, str) and 0 < len(value) <= REQUEST_ID_MAX:
            return value
    return None


def parse_frame(text: str | None) -> Frame:
    """JSON object with a known `type` and a valid optional `request_id`, else an ApplicationError."""
    if text is None:
        raise BadJson("frames must be JSON text, not binary")
    if len(text) > max_frame_chars():
        raise TooLong(f"the frame is {len(text)} characters; the limit is {max_frame_chars()}")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise BadJson("the frame is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadJson("a frame must be a JSON object")
    if has_nul(data):
        raise BadField("text must not contain the NUL character (U+0000)")
    if "request_id" in data and request_id_of(data) is None:
        raise BadField(f"request_id must be a string of 1..{REQUEST_ID_MAX} characters", field="request_id")
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in CLIENT_TYPES:
        raise BadType(f"unknown frame type {kind!r}; expected one of: {', '.join(CLIENT_TYPES)}")
    return Frame(type=kind, data=data, request_id=request_id_of(data))


def uuid_field(data: dict, name: str, *, nullable: bool = False) -> str | None:
    """A required uuid string field (or null when `nullable`)."""
    if name not in data:
        raise BadField(f"{name} is required", field=name)
    value = data[name]
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise BadField(f"{name} must be a uuid string", field=name)
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise BadField(f"{name} must be a uuid string", field=name) from None


def non_negative_int_field(data: dict, name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadField(f"{name} must be an integer >= 0", field=name)
    return value


def string_field(data: dict, name: str) -> Any:
    """Presence check only; the value is validated by the service that uses it."""
    if name not in data:
        raise BadField(f"{name} is required", field=name)
    return data[name]
