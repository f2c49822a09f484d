"""Page views. The chat itself runs over the websocket; these pages hand the browser its identity and boot data."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from chatapp import identity
from chatapp.web.csp import content_security_policy
from chatapp.web.forms import SignupForm


def optional_url(name: str) -> str | None:
    """The url for `name`, or None while the view behind it is not installed (e.g. the API key page)."""
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


def _safe_next(request: HttpRequest) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if target and allowed else reverse("chat")


@content_security_policy
@require_http_methods(["GET", "HEAD"])
def chat_page(request: HttpRequest, conversation_id: UUID | None = None) -> HttpResponse:
    """The chat page; a first-time visitor becomes a guest here so the socket has a user to belong to."""
    user = identity.guest_login(request)
    boot = {
        "conversationId": str(conversation_id) if conversation_id else None,
        "socketPath": "/ws/chat/",
        "user": {"username": user.get_username(), "isGuest": identity.is_guest(user)},
    }
    context = {
        "boot": boot,
        "is_guest": boot["user"]["isGuest"],
        "api_keys_url": optional_url("api-keys"),
    }
    return render(request, "chat.html", context)


@content_security_policy
@require_http_methods(["GET", "HEAD", "POST"])
def signup_page(request: HttpRequest) -> HttpResponse:
    """Sign-up: the current guest becomes the new account, so the chats made so far stay."""
    if request.user.is_authenticated and not identity.is_guest(request.user):
        return redirect("chat")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            identity.account_signup(
                request,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
            )
        except identity.IdentityError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect(_safe_next(request))
    return render(request, "auth/signup.html", {"form": form, "next": request.GET.get("next", "")})


@method_decorator(content_security_policy, name="dispatch")
class LoginPage(auth_views.LoginView):
    """Log-in; a guest may log in too (its own chats stay with the guest identity it leaves)."""

    template_name = "auth/login.html"
    redirect_authenticated_user = False

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["is_guest"] = identity.is_guest(self.request.user)
        return context


class LogoutPage(auth_views.LogoutView):
    """Log-out (POST only); the next page view starts a fresh guest."""

    next_page = "chat"
