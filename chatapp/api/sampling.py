"""Sampling parameters of an OpenAI request, checked here and mapped to the engine's SamplingParams kwargs.

The checks here name the parameter at fault; the engine's torch-free SamplingParams then validates the result too,
so a request the engine would refuse is refused with a 400 before anything is queued.
"""

from __future__ import annotations

import math
from typing import Any

from inference.engine.sampling_params import SamplingParams

from .errors import ApiError, bad_param

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
SEED_MAX = 2**63 - 1


def _number(body: dict, name: str, low: float, high: float, *, low_open: bool = False) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_param(name, f"'{name}' must be a finite number, got {value!r}.")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        left = "(" if low_open else "["
        raise bad_param(name, f"'{name}' must be in {left}{low:g}, {high:g}], got {value!r}.")
    return float(value)


def _integer(body: dict, name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_param(name, f"'{name}' must be an integer, got {value!r}.")
    if value < low or value > high:
        raise bad_param(name, f"'{name}' must be between {low} and {high}, got {value}.")
    return value


def _top_k(body: dict) -> int | None:
    value = _integer(body, "top_k", -1, 2**31 - 1)
    if value == 0:
        raise bad_param("top_k", "'top_k' must be -1 (disabled) or at least 1, got 0.")
    return value


def _stop(body: dict) -> list[str] | None:
    value = body.get("stop")
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad_param("stop", "'stop' must be a string or a list of strings.")
    if len(items) > MAX_STOP_STRINGS:
        raise bad_param("stop", f"'stop' takes at most {MAX_STOP_STRINGS} strings, got {len(items)}.")
    for s in items:
        if not s:
            raise bad_param("stop", "'stop' strings must not be empty.")
        if len(s) > MAX_STOP_CHARS:
            raise bad_param("stop", f"'stop' strings are at most {MAX_STOP_CHARS} characters.")
    return items or None


def _bool(body: dict, name: str) -> bool | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise bad_param(name, f"'{name}' must be true or false, got {value!r}.")
    return value


def max_tokens_of(body: dict, max_allowed: int) -> int | None:
    """max_completion_tokens (chat's newer name) or max_tokens; None means "the server's default"."""
    new = _integer(body, "max_completion_tokens", 1, max_allowed)
    old = _integer(body, "max_tokens", 1, max_allowed)
    if new is not None and old is not None and new != old:
        raise bad_param("max_tokens", "'max_tokens' and 'max_completion_tokens' differ; send one of them.")
    return new if new is not None else old


def sampling_kwargs(body: dict, *, max_allowed_tokens: int) -> dict[str, Any]:
    """The engine's SamplingParams kwargs for this request (absent ones left to the engine's defaults)."""
    kwargs: dict[str, Any] = {
        "temperature": _number(body, "temperature", 0.0, 2.0),
        "top_p": _number(body, "top_p", 0.0, 1.0, low_open=True),
        "top_k": _top_k(body),
        "min_p": _number(body, "min_p", 0.0, 1.0),
        "repetition_penalty": _number(body, "repetition_penalty", 0.0, 10.0, low_open=True),
        "presence_penalty": _number(body, "presence_penalty", -2.0, 2.0),
        "frequency_penalty": _number(body, "frequency_penalty", -2.0, 2.0),
        "max_tokens": max_tokens_of(body, max_allowed_tokens),
        "stop": _stop(body),
        "seed": _integer(body, "seed", 0, SEED_MAX),
        "ignore_eos": _bool(body, "ignore_eos"),
    }
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    try:  # the engine's own rules as a backstop (a torch-free module), so the worker never refuses a row
        SamplingParams(**kwargs)
    except ValueError as exc:
        raise ApiError(400, f"Invalid sampling parameters: {exc}.", code="invalid_value") from None
    return kwargs
