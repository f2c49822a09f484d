"""Typed readers for settings taken from the environment.

Every setting comes from an environment variable with an embedded default; a value that does not parse stops
start-up with an error naming the variable, what it expects and what it got, instead of a confusing failure later.
"""

from __future__ import annotations

import os
from collections.abc import Callable


class ConfigError(RuntimeError):
    """A setting from the environment is malformed."""


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | None) -> str | None:
    """The variable's value, or `default` when unset or blank."""
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    """Accepts 1/0, true/false, yes/no, on/off (any case)."""
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be a boolean (1/0, true/false, yes/no, on/off), got {value!r}")


def _number(name: str, default, parse: Callable, kind: str, minimum, maximum):
    value = _raw(name)
    if value is None:
        return default
    try:
        number = parse(value)
    except ValueError:
        raise ConfigError(f"{name} must be {kind}, got {value!r}") from None
    if (
        number != number
        or (minimum is not None and number < minimum)
        or (maximum is not None and number > maximum)
    ):
        raise ConfigError(f"{name} must be {kind} {_range_text(minimum, maximum)}, got {value!r}")
    return number


def _range_text(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f"in [{minimum}, {maximum}]"
    if minimum is not None:
        return f">= {minimum}"
    return f"<= {maximum}" if maximum is not None else "(finite)"


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (compared case-insensitively, returned as listed)."""
    value = _raw(name)
    if value is None:
        return default
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer within [minimum, maximum]."""
    return _number(name, default, int, "an integer", minimum, maximum)


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """A finite number within [minimum, maximum]."""
    return _number(name, default, float, "a number", minimum, maximum)


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blank items are dropped."""
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_origins(name: str) -> list[str]:
    """A comma-separated list of origins such as https://chat.example.com (scheme required)."""
    origins = env_list(name, [])
    for origin in origins:
        if not origin.startswith(("http://", "https://")):
            raise ConfigError(f"{name} entries must start with http:// or https://, got {origin!r}")
    return origins


def redis_url(name: str, default: str) -> str:
    """A redis://, rediss:// or unix:// URL."""
    value = env_str(name, default)
    if not value.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"{name} must be a redis://, rediss:// or unix:// URL, got {value!r}")
    return value
