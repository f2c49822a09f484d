"""API keys: a user's key page and the admin both create (secret shown once, only a hash stored) and revoke."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from chatapp.api.keys import api_key_authenticate, api_key_create
from chatapp.identity import guest_create
from chatapp.models import ApiKey

pytestmark = pytest.mark.django_db
KEY_RE = re.compile(r"sk-[A-Za-z0-9]{8}_[A-Za-z0-9_-]{43}")


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_key_page_creates_shows_once_and_revokes():
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    client = logged_in(alice)
    assert client.get("/keys/").status_code == 200
    response = client.post("/keys/", {"action": "create", "name": "laptop"})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    secret = KEY_RE.search(response.content.decode()).group(0)
    row = ApiKey.objects.get(user=alice, name="laptop")
    assert secret not in row.hashed_secret and row.hashed_secret.startswith("sha256$")
    assert api_key_authenticate(secret).id == row.id
    listing = client.get("/keys/").content.decode()
    assert row.prefix in listing and secret not in listing  # shown once only
    response = client.post("/keys/", {"action": "revoke", "key_id": row.id})
    assert response.status_code == 302
    assert api_key_authenticate(secret) is None and ApiKey.objects.get(id=row.id).revoked_at is not None


def test_key_page_refuses_others_keys_guests_and_anonymous():
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    bob = get_user_model().objects.create_user("bob", password="pw-bob-12345")
    row, secret = api_key_create(user=bob, name="bob's")
    response = logged_in(alice).post("/keys/", {"action": "revoke", "key_id": row.id})
    assert response.status_code == 404 and api_key_authenticate(secret) is not None
    guest = logged_in(guest_create())
    assert guest.post("/keys/", {"action": "create", "name": "x"}).status_code == 403
    assert not ApiKey.objects.exclude(user=bob).exists()
    anonymous = Client().get("/keys/")
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]
    assert logged_in(alice).post("/keys/", {"action": "create", "name": "x" * 101}).status_code == 400


def test_key_page_needs_csrf_token():
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post("/keys/", {"action": "create", "name": "x"}).status_code == 403
    assert not ApiKey.objects.exists()


def test_admin_creates_a_key_for_a_user_and_revokes_it():
    admin = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    client = logged_in(admin)
    assert client.get("/admin/chatapp/apikey/add/").status_code == 200
    response = client.post("/admin/chatapp/apikey/add/", {"user": alice.id, "name": "ci"})
    assert response.status_code == 200
    secret = KEY_RE.search(response.content.decode()).group(0)
    row = ApiKey.objects.get(user=alice, name="ci")
    assert api_key_authenticate(secret).id == row.id
    listing = client.get("/admin/chatapp/apikey/").content.decode()
    assert row.prefix in listing and secret not in listing and f"api_key__id__exact={row.id}" in listing
    assert client.get(f"/admin/chatapp/generation/?api_key__id__exact={row.id}").status_code == 200
    client.post("/admin/chatapp/apikey/", {"action": "revoke", "_selected_action": [row.id]}, follow=True)
    assert api_key_authenticate(secret) is None
