"""Serves the static files (static/ and the apps' own, such as the admin's) from the web process, DEBUG on or off.

The product has a few dozen small static files and runs under Daphne only, with no separate file server in front,
so the web process serves them, found the way `collectstatic` would find them (STATICFILES_DIRS, then each
app's static/ folder: without the apps' the admin has no styles): whole-file responses (no sync file iterator under ASGI), with Last-Modified /
If-Modified-Since revalidation so a browser's repeat visits cost a 304.
"""

from __future__ import annotations

import mimetypes
import posixpath
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils.http import http_date
from django.views.decorators.http import require_http_methods
from django.views.static import was_modified_since

_CACHE_CONTROL = "no-cache"  # always revalidate: the names carry no content hash


def _find(path: str) -> Path | None:
    """The file a static path names, or None (folders, paths leaving the static folders, missing files)."""
    normalized = posixpath.normpath(path).lstrip("/")
    if normalized.startswith("..") or "\x00" in normalized:
        return None
    try:
        found = finders.find(normalized)
    except SuspiciousFileOperation:
        return None
    if not found:
        return None
    full = Path(found)
    return full if full.is_file() else None


@require_http_methods(["GET", "HEAD"])
def static_file(request: HttpRequest, path: str) -> HttpResponse:
    """One static file, or 404 for anything else."""
    full = _find(path)
    if full is None:
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
