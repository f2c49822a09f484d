"""The ASGI handler for /v1: Django without the browser's middleware, so an API call never leaves the event loop
for it.

Django's own middleware (sessions, CSRF, auth, messages, ...) is sync-only: under ASGI each of its
process_request/process_response/process_view methods runs through sync_to_async, a hop to a thread and back. The
site's seven cost about twelve hops per request, measured at 14 ms of Daphne's CPU for a bare `GET /v1/models`.
The API needs none of them: it authenticates by Bearer key alone (views.py), never reads a session or cookie, and
answers JSON. What it does need from them is kept here, natively async: the Host check against ALLOWED_HOSTS (logged
as Django logs it), the nosniff header, and Content-Length on whole responses (CommonMiddleware's).
"""

from __future__ import annotations

import logging

from django.core.exceptions import DisallowedHost, ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponse

from chatapp.api.errors import ApiError, error_response

API_PREFIX = "/v1/"
security_log = logging.getLogger("django.security.DisallowedHost")


def is_api_path(path: str) -> bool:
    """True for the paths ApiHandler serves: everything under /v1/ (a bare /v1 gets the site's slash redirect)."""
    return path.startswith(API_PREFIX)


def api_guard(get_response):
    """Async middleware: refuses a Host outside ALLOWED_HOSTS (as CommonMiddleware would), marks responses nosniff,
    and gives whole responses their Content-Length."""

    async def middleware(request: HttpRequest) -> HttpResponse:
        try:
            request.get_host()
        except DisallowedHost as exc:
            security_log.error(str(exc), extra={"status_code": 400, "request": request})
            response = error_response(
                ApiError(400, "This server does not answer for that Host.", code="disallowed_host")
            )
        else:
            response = await get_response(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if not response.streaming and not response.has_header("Content-Length"):
            response.headers["Content-Length"] = str(len(response.content))
        return response

    return middleware


class ApiHandler(ASGIHandler):
    """Django's ASGIHandler for /v1 paths, with api_guard as its only middleware (routing: chatapp.asgi)."""

    def load_middleware(self, is_async: bool = False) -> None:
        if not is_async:
            raise ImproperlyConfigured("ApiHandler serves ASGI only")
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(
            api_guard(convert_exception_to_response(self._get_response_async))
        )
