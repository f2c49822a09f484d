"""The page views and identity rules, through Django's test client (no browser needed).

A first visit makes a guest; signing up turns that same user into an account, so its conversations stay; log-out
starts a new guest; static files are served by the app itself, and nothing outside static/ is.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.contrib.auth import get_user_model

from chatapp import identity
from chatapp.models import Conversation

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-Secret-42"


def boot_of(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="boot" type="application/json">') + len(
        '<script id="boot" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def session_user(client):
    return get_user_model().objects.get(pk=client.session["_auth_user_id"])


def test_first_page_view_makes_a_guest_that_stays_for_the_session(client):
    first = client.get("/")
    assert first.status_code == 200
    guest = session_user(client)
    assert identity.is_guest(guest) and not guest.has_usable_password()
    assert boot_of(first)["user"] == {"username": guest.username, "isGuest": True}
    client.get("/")
    assert session_user(client).pk == guest.pk
    assert get_user_model().objects.count() == 1


def test_conversation_url_renders_the_chat_page_with_that_conversation(client):
    conversation_id = uuid.uuid4()
    response = client.get(f"/c/{conversation_id}")
    assert response.status_code == 200
    assert boot_of(response)["conversationId"] == str(conversation_id)
    assert client.get("/c/not-a-uuid").status_code == 404


def test_sign_up_turns_the_guest_into_an_account_keeping_its_chats(client):
    client.get("/")
    guest = session_user(client)
    Conversation.objects.create(user=guest, title="made as a guest")
    response = client.post("/signup/", {"username": "alice", "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    account = session_user(client)
    assert account.pk == guest.pk and account.username == "alice"
    assert not identity.is_guest(account) and account.check_password(PASSWORD)
    assert list(account.conversations.values_list("title", flat=True)) == ["made as a guest"]
    page = client.get("/")
    assert boot_of(page)["user"] == {"username": "alice", "isGuest": False}
    assert b"Log out" in page.content and b"Sign up</a>" not in page.content
    assert client.get("/signup/").status_code == 302  # an account does not sign up again


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"username": "guest-abc"}, "may not start with"),
        ({"username": "taken"}, "taken"),
        ({"username": "bob", "password2": "something-else-9"}, "differ"),
        ({"username": "bob", "password1": "123", "password2": "123"}, "too short"),
        ({"username": "bad name!"}, "Enter a valid username"),
    ],
)
def test_sign_up_refuses_bad_input_and_keeps_the_guest(client, fields, error):
    get_user_model().objects.create_user(username="taken", password=PASSWORD)
    client.get("/")
    guest = session_user(client)
    response = client.post("/signup/", {"password1": PASSWORD, "password2": PASSWORD, **fields})
    assert response.status_code == 200
    assert error in response.content.decode()
    assert session_user(client).pk == guest.pk and identity.is_guest(session_user(client))


def test_log_out_then_a_fresh_guest_and_log_in_returns_to_the_account(client):
    account = get_user_model().objects.create_user(username="carol", password=PASSWORD)
    Conversation.objects.create(user=account, title="carol's chat")
    client.get("/")
    response = client.post("/login/", {"username": "carol", "password": PASSWORD})
    assert response.status_code == 302
    assert session_user(client).pk == account.pk
    assert client.get("/logout/").status_code == 405  # log-out is a POST (a link cannot log anyone out)
    assert client.post("/logout/").status_code == 302
    client.get("/")
    fresh = session_user(client)
    assert identity.is_guest(fresh) and fresh.pk != account.pk
    assert not fresh.conversations.exists()
    bad = client.post("/login/", {"username": "carol", "password": "wrong-password"})
    assert bad.status_code == 200 and session_user(client).pk == fresh.pk


def test_sign_up_redirects_only_to_this_site(client):
    client.get("/")
    response = client.post(
        "/signup/?next=https://evil.example/",
        {"username": "dave", "password1": PASSWORD, "password2": PASSWORD, "next": "https://evil.example/"},
    )
    assert response.status_code == 302 and response["Location"] == "/"


def test_static_files_are_served_and_nothing_outside_static(client):
    script = client.get("/static/chat/main.js")
    assert script.status_code == 200 and script["Content-Type"].startswith("text/javascript")
    assert b"ChatApp" in script.content
    again = client.get("/static/chat/main.js", HTTP_IF_MODIFIED_SINCE=script["Last-Modified"])
    assert again.status_code == 304
    assert client.get("/static/vendor/marked/LICENSE").status_code == 200
    admin_css = client.get("/static/admin/css/base.css")  # the admin's own files: without them it is unstyled
    assert admin_css.status_code == 200 and admin_css["Content-Type"].startswith("text/css")
    for path in (
        "/static/../chatapp/settings.py",
        "/static/%2e%2e/manage.py",
        "/static/admin/../../../../settings.py",
        "/static/admin/%2e%2e/%2e%2e/%2e%2e/%2e%2e/templates/admin/base.html",
        "/static/admin/",
        "/static/chat/",
        "/static/nope.js",
    ):
        assert client.get(path).status_code == 404, path


def test_chat_page_loads_only_local_assets(client):
    html = client.get("/").content.decode()
    assert "http://" not in html.replace('"http://www.w3.org', "") and "https://" not in html
    assert '<script type="module" src="/static/chat/main.js">' in html


def test_pages_forbid_scripts_from_anywhere_but_the_site(client):
    for path in ("/", f"/c/{uuid.uuid4()}", "/signup/", "/login/"):
        policy = client.get(path)["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "object-src 'none'" in policy, path


def test_unknown_pages_get_the_sites_own_not_found_page(client):
    """Not Django's bare page: the site's look, sized for a phone, and a way back to the chat."""
    response = client.get("/no-such-page")
    html = response.content.decode()
    assert response.status_code == 404
    assert 'name="viewport"' in html and "/static/css/app.css" in html
    assert "Page not found" in html and 'href="/"' in html


def test_the_server_error_page_renders_without_a_request_context():
    """Django renders 500.html with no context; it must not fail itself."""
    from django.template import loader

    html = loader.get_template("500.html").render()
    assert "Something went wrong" in html and "/static/css/app.css" in html
