"""API keys: create (the secret is returned once), revoke, and authenticate a Bearer token.

A key is "sk-" + 8 random letters/digits (the prefix, stored and shown in lists) + "_" + a 256-bit random secret.
Only a SHA-256 of the whole key is stored. A fast hash is right here: the secret is random with 256 bits of entropy,
so there is nothing for a slow, salted password hash to protect against, and every request checks a key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string

from django.db import transaction
from django.utils import timezone

from chatapp.models import ApiKey

KEY_START = "sk-"
PREFIX_CHARS = 8
PREFIX_LEN = len(KEY_START) + PREFIX_CHARS
_ALPHABET = string.ascii_letters + string.digits
MAX_KEY_LEN = 200
MAX_NAME_CHARS = 100
MAX_ACTIVE_KEYS_PER_USER = 20


class ApiKeyError(ValueError):
    """A key operation that cannot be done as asked (the message is safe to show)."""


def _hash(key: str) -> str:
    return "sha256$" + hashlib.sha256(key.encode()).hexdigest()


def api_key_create(*, user, name: str) -> tuple[ApiKey, str]:
    """A new key for `user`; returns the row and the full secret key, which is never retrievable again."""
    name = (name or "").strip() or "API key"
    if len(name) > MAX_NAME_CHARS:
        raise ApiKeyError(f"A key name is at most {MAX_NAME_CHARS} characters.")
    if ApiKey.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_KEYS_PER_USER:
        raise ApiKeyError(f"At most {MAX_ACTIVE_KEYS_PER_USER} active keys per user: revoke one first.")
    for _ in range(5):
        prefix = KEY_START + "".join(secrets.choice(_ALPHABET) for _ in range(PREFIX_CHARS))
        if not ApiKey.objects.filter(prefix=prefix).exists():
            break
    key = f"{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        row = ApiKey.objects.create(user=user, name=name, prefix=prefix, hashed_secret=_hash(key))
    return row, key


def api_key_revoke(*, user, key_id: int) -> ApiKey | None:
    """Revokes the user's key with that id; None when the user has no such active key."""
    row = ApiKey.objects.filter(id=key_id, user=user, revoked_at__isnull=True).first()
    if row is None:
        return None
    row.revoked_at = timezone.now()
    row.save(update_fields=["revoked_at"])
    return row


def api_keys_of(*, user) -> list[ApiKey]:
    """The user's keys, newest first, revoked ones included (they still own the usage history)."""
    return list(ApiKey.objects.filter(user=user).order_by("-created_at"))


def api_key_authenticate(token: str) -> ApiKey | None:
    """The active key whose secret this is (with its user loaded), or None."""
    if not token.startswith(KEY_START) or len(token) > MAX_KEY_LEN or len(token) <= PREFIX_LEN:
        return None
    row = (
        ApiKey.objects.filter(prefix=token[:PREFIX_LEN], revoked_at__isnull=True, user__is_active=True)
        .select_related("user")
        .first()
    )
    if row is None or not hmac.compare_digest(row.hashed_secret, _hash(token)):
        return None
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
        # Coarse on purpose: one write a minute per key, not one per request.
        ApiKey.objects.filter(id=row.id).update(last_used_at=now)
    return row
