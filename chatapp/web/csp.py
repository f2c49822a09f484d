"""A strict Content-Security-Policy for the browser pages: only this site's own scripts, styles and sockets.

Model output is sanitized before it reaches the DOM (static/chat/markdown.js); this header is the second line of
defence, so even a sanitizer bug could not load or run a script from anywhere, inline or remote.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def content_security_policy(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Adds the policy to the view's responses (unless the view set its own)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response

    return wrapped
