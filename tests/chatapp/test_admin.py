"""The admin shows every conversation with its messages and each answer's generation details, read-only."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from chatapp import services
from chatapp.models import Generation

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(settings, demo_model_dir):
    settings.LLM_MODEL = str(demo_model_dir)
    users = get_user_model().objects
    alice = users.create_user("alice", password="pw-123456")
    bob = users.create_user("bob", password="pw-123456")
    a = services.chat_send(
        user=alice, conversation_id=None, content="pelican facts", params={"temperature": 0.5}
    )
    b = services.chat_send(user=bob, conversation_id=None, content="walrus facts")
    worker = services.worker_register(
        channel_name="inference-worker.x!y", hostname="h", pid=1, model=str(demo_model_dir), is_demo=True, max_context=2048,
        capacity=1,
    )  # fmt: skip
    services.generation_claim(worker=worker, limit=1)  # alice's (oldest) answer is running
    cp = services.Checkpoint(
        generation_id=a.generation.id, text="Pelicans fly.", seq=2, final_state="done", finish_reason="stop",
        stats={"prompt_tokens": 12, "completion_tokens": 4, "ttft_ms": 31.5, "tokens_per_s": 88.0},
    )  # fmt: skip
    services.generation_checkpoint(worker=worker, checkpoints=[cp], active_ids=[])
    return a, b


@pytest.fixture
def admin_client_(client):
    admin = get_user_model().objects.create_superuser("root", password="pw-123456")
    client.force_login(admin)
    return client


def test_conversations_searchable_by_user_and_text_and_filterable(admin_client_, history):
    a, b = history
    page = admin_client_.get("/admin/chatapp/conversation/", {"q": "alice"}).content.decode()
    assert "pelican facts" in page and "walrus facts" not in page
    page = admin_client_.get("/admin/chatapp/conversation/", {"q": "walrus"}).content.decode()
    assert "walrus facts" in page and "pelican facts" not in page
    page = admin_client_.get(
        "/admin/chatapp/conversation/", {"generations__state": "queued"}
    ).content.decode()
    assert "walrus facts" in page and "pelican facts" not in page
    page = admin_client_.get("/admin/chatapp/generation/", {"state__exact": "done"}).content.decode()
    assert str(a.generation.id) in page and str(b.generation.id) not in page


def test_conversation_shows_messages_inline_and_generation_details(admin_client_, history):
    a, _b = history
    page = admin_client_.get(f"/admin/chatapp/conversation/{a.conversation.id}/change/").content.decode()
    assert "pelican facts" in page and "Pelicans fly." in page
    assert f"/admin/chatapp/generation/{a.generation.id}/change/" in page
    detail = admin_client_.get(f"/admin/chatapp/generation/{a.generation.id}/change/").content.decode()
    for shown in ("31.5", "88.0", "stop", "temperature", "pelican facts"):
        assert shown in detail


def test_admin_cannot_edit_generations(admin_client_, history):
    a, _b = history
    response = admin_client_.post(f"/admin/chatapp/generation/{a.generation.id}/change/", {"text": "forged"})
    assert response.status_code == 403
    assert Generation.objects.get(id=a.generation.id).text == "Pelicans fly."
    assert admin_client_.get("/admin/chatapp/generation/add/").status_code == 403
