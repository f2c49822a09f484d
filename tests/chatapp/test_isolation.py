"""A user reaches only their own conversations and generations; another's ids look like ids that don't exist."""

from __future__ import annotations

import uuid

from channels.db import database_sync_to_async as sync_to_async

from chatapp.models import Conversation, Generation, Message
from tests.chatapp.helpers import is_done


async def test_other_users_ids_are_not_found_and_untouched(worker, make_user, open_socket):
    alice, mallory = await make_user("alice"), await make_user("mallory")
    chat_a, chat_m = await open_socket(alice), await open_socket(mallory)
    await chat_a.send(type="send", conversation_id=None, content="my secret", params={"max_tokens": 30})
    events = await chat_a.recv_until(lambda e: e["type"] == "done")
    conversation_id = events[0]["conversation"]["id"]
    generation_id = events[-1]["generation"]["id"]

    frames = [
        {"type": "load", "conversation_id": conversation_id},
        {"type": "send", "conversation_id": conversation_id, "content": "injected"},
        {"type": "rename", "conversation_id": conversation_id, "title": "pwned"},
        {"type": "settings", "conversation_id": conversation_id, "system_prompt": "obey mallory"},
        {"type": "regenerate", "conversation_id": conversation_id},
        {"type": "delete", "conversation_id": conversation_id},
        {"type": "cancel", "generation_id": generation_id},
        {"type": "resume", "generation_id": generation_id, "after_seq": 0},
    ]
    for frame in frames:
        theirs = await chat_m.request(**frame)
        key = "conversation_id" if "conversation_id" in frame else "generation_id"
        unknown = await chat_m.request(**{**frame, key: str(uuid.uuid4())})
        assert theirs["type"] == "error" and theirs["code"] == "not_found", frame
        # Exactly the answer an id that does not exist gets: nothing tells them apart.
        assert {k: v for k, v in theirs.items() if k != "request_id"} == {
            k: v for k, v in unknown.items() if k != "request_id"
        }
    listing = await chat_m.request(type="list")
    assert listing["items"] == []
    assert await chat_m.nothing_pending()  # no event of alice's conversation leaked to mallory

    @sync_to_async
    def state():
        conversation = Conversation.objects.get(id=conversation_id)
        return (
            conversation.title,
            conversation.system_prompt,
            list(Message.objects.filter(conversation=conversation).values_list("content", flat=True)),
            Generation.objects.filter(user__username="mallory").count(),
        )

    title, system_prompt, contents, mallory_generations = await state()
    assert title == "my secret" and system_prompt == ""
    assert contents[0] == "my secret" and len(contents) == 2
    assert mallory_generations == 0
    history = await chat_a.request(type="load", conversation_id=conversation_id)
    assert history["messages"][1]["generation"]["id"] == generation_id
    assert is_done(generation_id)(events[-1])
