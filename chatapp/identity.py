"""Who is chatting: a guest account made on the first page view, turned into a real account at sign-up.

A visitor can chat at once, so the first page view creates a Django user for them and logs it in; its chats are
then tied to that browser session like any account's. Signing up renames that same user and gives it a password,
so nothing has to be copied and the history simply stays. A guest is recognised by its reserved username prefix
together with an unusable password; sign-up refuses usernames with that prefix, so no real account looks like one.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model, login, update_session_auth_hash
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.http import HttpRequest

GUEST_PREFIX = "guest-"
_AUTH_BACKEND = "django.contrib.auth.backends.ModelBackend"


class IdentityError(Exception):
    """A sign-up that cannot be done as asked (the message is safe to show to the visitor)."""


def is_guest(user: AbstractBaseUser) -> bool:
    """True for the visitor accounts made by `guest_login` that have not signed up yet."""
    if not getattr(user, "is_authenticated", False):
        return False
    return user.get_username().startswith(GUEST_PREFIX) and not user.has_usable_password()


def guest_create() -> AbstractBaseUser:
    """A new guest user with a random name and no usable password."""
    user_model = get_user_model()
    for _ in range(5):
        username = f"{GUEST_PREFIX}{secrets.token_hex(8)}"
        try:
            with transaction.atomic():
                return user_model.objects.create_user(username=username, password=None)
        except IntegrityError:
            continue
    raise IdentityError("could not pick a free guest name; try again")


def guest_login(request: HttpRequest) -> AbstractBaseUser:
    """The request's user, after logging in a fresh guest when the visitor has no identity yet."""
    if request.user.is_authenticated:
        return request.user
    user = guest_create()
    login(request, user, backend=_AUTH_BACKEND)
    return user


def account_signup(request: HttpRequest, *, username: str, password: str) -> AbstractBaseUser:
    """Turns the current guest into an account (keeping its chats), or makes a new account for a visitor.

    `username` and `password` must already be validated (see chatapp.web.forms.SignupForm).
    """
    if username.startswith(GUEST_PREFIX):
        raise IdentityError(f"usernames may not start with {GUEST_PREFIX!r}")
    user_model = get_user_model()
    current = request.user
    try:
        with transaction.atomic():
            if current.is_authenticated and is_guest(current):
                user = user_model.objects.select_for_update().get(pk=current.pk)
                user.username = username
                user.set_password(password)
                user.save(update_fields=["username", "password"])
            elif current.is_authenticated:
                raise IdentityError("you are already signed in; log out first to make another account")
            else:
                user = user_model.objects.create_user(username=username, password=password)
    except IntegrityError:
        raise IdentityError("that username is taken") from None
    if current.is_authenticated:
        # The password changed: keep this session valid instead of logging the visitor out.
        update_session_auth_hash(request, user)
    else:
        login(request, user, backend=_AUTH_BACKEND)
    return user
