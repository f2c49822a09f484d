"""Websocket origin check (no cross-site websocket hijacking).

A socket is accepted only when its Origin is the site's own: the origin's host is in ALLOWED_HOSTS and its
scheme://host:port is the one the request was made to (the Host header), or is listed in CSRF_TRUSTED_ORIGINS.
Anything else is accepted and closed at once with code 4403, so browser clients see a reason, not a bare 1006.
"""

from __future__ import annotations

from urllib.parse import urlparse

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http.request import split_domain_port, validate_host

CLOSE_FORBIDDEN_ORIGIN = 4403


class _OriginDenier(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_FORBIDDEN_ORIGIN)


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def origin_allowed(scope: dict) -> bool:
    """True when the socket's Origin header names this site (see the module docstring)."""
    origin = _header(scope, b"origin")
    if not origin:
        return False
    parsed = urlparse(origin)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return False
    if origin.rstrip("/") in {o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS}:
        return True
    host_header = _header(scope, b"host")
    if host_header is None:
        return False
    host, _port = split_domain_port(host_header)
    if not host or not validate_host(host, settings.ALLOWED_HOSTS):
        return False
    if not validate_host(parsed.hostname.lower(), settings.ALLOWED_HOSTS):
        return False
    return parsed.netloc.lower() == host_header.lower()


class SameOriginValidator:
    """ASGI middleware: passes same-origin websockets on, closes the rest with 4403."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator only handles websocket connections")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await _OriginDenier()(scope, receive, send)
