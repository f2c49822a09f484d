"""The "API keys" page: a signed-up user lists, creates and revokes their keys (a new secret is shown once)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from chatapp import identity
from chatapp.api import keys


def _render(request: HttpRequest, *, new_key: str | None = None, error: str | None = None, status: int = 200):
    context = {
        "is_guest": identity.is_guest(request.user),
        "keys": keys.api_keys_of(user=request.user),
        "new_key": new_key,
        "error": error,
        "base_url": request.build_absolute_uri("/v1"),
        "max_name_chars": keys.MAX_NAME_CHARS,
    }
    return render(request, "keys.html", context, status=status)


@never_cache
@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def api_keys_page(request: HttpRequest) -> HttpResponse:
    """GET lists the keys; POST action=create makes one (shown once), action=revoke ends one."""
    if request.method != "POST":
        return _render(request)
    if identity.is_guest(request.user):
        return _render(request, error="Sign up first: API keys belong to an account.", status=403)
    action = request.POST.get("action")
    if action == "create":
        try:
            _row, secret = keys.api_key_create(user=request.user, name=request.POST.get("name", ""))
        except keys.ApiKeyError as exc:
            return _render(request, error=str(exc), status=400)
        return _render(request, new_key=secret)
    if action == "revoke":
        try:
            key_id = int(request.POST.get("key_id", ""))
        except ValueError:
            return _render(request, error="No such key.", status=400)
        if keys.api_key_revoke(user=request.user, key_id=key_id) is None:
            return _render(request, error="No such key.", status=404)
        return redirect("api-keys")
    return _render(request, error="Unknown action.", status=400)
