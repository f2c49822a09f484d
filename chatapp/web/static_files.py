"""Serves the files of static/ from the web process itself, with DEBUG on or off.

The product has a few dozen small static files and runs under Daphne only, with no separate file server in front,
so the web process serves them: whole-file responses (no sync file iterator under ASGI), with Last-Modified /
If-Modified-Since revalidation so a browser's repeat visits cost a 304.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils._os import safe_join
from django.utils.http import http_date
from django.views.decorators.http import require_http_methods
from django.views.static import was_modified_since

STATIC_ROOT = Path(__file__).resolve().parents[2] / "static"
_CACHE_CONTROL = "no-cache"  # always revalidate: the names carry no content hash


@require_http_methods(["GET", "HEAD"])
def static_file(request: HttpRequest, path: str) -> HttpResponse:
    """One file below static/, or 404 for anything else (folders, paths leaving static/, missing files)."""
    try:
        full = Path(safe_join(STATIC_ROOT, path))
    except Exception:  # SuspiciousFileOperation for '..' tricks
        raise Http404("not found") from None
    if not full.is_file():
        raise Http404("not found")
    stat = full.stat()
    if not was_modified_since(request.META.get("HTTP_IF_MODIFIED_SINCE"), int(stat.st_mtime)):
        return HttpResponseNotModified()
    content_type, _ = mimetypes.guess_type(full.name)
    response = HttpResponse(full.read_bytes(), content_type=content_type or "application/octet-stream")
    response.headers["Last-Modified"] = http_date(stat.st_mtime)
    response.headers["Cache-Control"] = _CACHE_CONTROL
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
