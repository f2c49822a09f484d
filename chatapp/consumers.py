"""The chat socket (`/ws/chat/`, docs/protocol.md): thin glue between frames, services and the channel layer.

Every frame is parsed and checked (chatapp.frames), every id is looked up for *this* user (another user's id is
`not_found`), writes go through chatapp.services in one transaction, and only then are workers nudged and events
sent. The socket follows one conversation at a time (joins its group) and forwards that group's events, keeping the
deltas of each answer in `seq` order: an old one is dropped, a gap is filled with a `snapshot` from the database.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from chatapp import selectors, services
from chatapp.errors import ApplicationError, NotFound, NoWorker
from chatapp.frames import Frame, non_negative_int_field, parse_frame, request_id_of, string_field, uuid_field
from chatapp.identity import is_guest
from chatapp.notify import group_event, nudge_workers, send_cancel
from chatapp.serializers import conversation_data, conversation_summary, generation_data, message_data
from inference import messages

log = logging.getLogger(__name__)

CLOSE_NOT_AUTHENTICATED = 4401


class ChatConsumer(AsyncWebsocketConsumer):
    """One browser tab's socket, owned by the session's user (a signed-up account or a guest)."""

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.group: str | None = None  # the followed conversation's (or API generation's) group
        self.conversation_id: str | None = None
        self.last_seq: dict[str, int] = {}
        await self.accept()
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=CLOSE_NOT_AUTHENTICATED)
            return
        await self._reply(await database_sync_to_async(self._hello)())

    def _hello(self) -> dict:
        model = selectors.current_model()
        return {
            "type": "hello",
            "user": {
                "id": self.user.pk,
                "username": self.user.get_username(),
                "is_guest": is_guest(self.user),
            },
            "model": model.as_data() if model.alive else None,
            "limits": {
                "max_message_chars": settings.CHAT_MAX_MESSAGE_CHARS,
                "max_tokens": model.max_tokens_limit,
            },
        }

    async def disconnect(self, code: int) -> None:
        await self._follow(None)  # closing does not cancel: answers finish and are saved

    # --- frames in ---------------------------------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not getattr(self, "user", None) or not self.user.is_authenticated:
            return
        request_id = None
        try:
            frame = parse_frame(text_data)
            request_id = frame.request_id
            await getattr(self, f"on_{frame.type}")(frame)
        except ApplicationError as exc:
            if request_id is None and text_data is not None:
                request_id = _request_id_from_text(text_data)
            await self._reply(exc.as_event(), request_id)
        except Exception:
            log.exception("chat frame failed")
            await self._reply({"type": "error", "code": "internal", "message": "internal error"}, request_id)

    async def on_send(self, frame: Frame) -> None:
        data = frame.data
        conversation_id = uuid_field(data, "conversation_id", nullable=True)
        result = await database_sync_to_async(services.chat_send)(
            user=self.user,
            conversation_id=conversation_id,
            content=string_field(data, "content"),
            system_prompt=data.get("system_prompt"),
            params=data.get("params"),
        )
        await self._announce_answer(frame, result)

    async def on_regenerate(self, frame: Frame) -> None:
        conversation_id = uuid_field(frame.data, "conversation_id")
        result = await database_sync_to_async(services.chat_regenerate)(
            user=self.user, conversation_id=conversation_id
        )
        await self._announce_answer(frame, result)

    async def _announce_answer(self, frame: Frame, result: services.ChatResult) -> None:
        """Follows the conversation, tells this and every other following socket, then wakes the workers."""
        conversation = result.conversation
        await self._follow(str(conversation.id))
        events = []
        if result.conversation_changed:
            events.append({"type": "conversation", "conversation": conversation_data(conversation)})
        if result.user_message is not None:
            events.append({"type": "message", "message": await _data(message_data, result.user_message)})
        generation = generation_data(
            result.generation, position=result.position, message_id=result.assistant_message.id
        )
        generation_event: dict[str, Any] = {"type": "generation", "generation": generation}
        if result.replaced_message_id is not None:
            generation_event["replaces_message_id"] = result.replaced_message_id
        events.append(generation_event)
        self.last_seq[generation["id"]] = 0
        for event in events:
            await self._reply(event, frame.request_id)
            await group_event(self.group, event, skip_channel=self.channel_name)
        await nudge_workers()
        if not await database_sync_to_async(selectors.workers_alive)(model=settings.LLM_MODEL):
            await self._reply(
                NoWorker(
                    "no inference worker is running; the answer stays queued until one starts"
                ).as_event(),
                frame.request_id,
            )

    async def on_list(self, frame: Frame) -> None:
        items = await database_sync_to_async(
            lambda: [conversation_summary(c) for c in selectors.conversation_list(user=self.user)]
        )()
        await self._reply({"type": "conversations", "items": items}, frame.request_id)

    async def on_load(self, frame: Frame) -> None:
        conversation_id = uuid_field(frame.data, "conversation_id")
        await self._follow(conversation_id)  # before reading, so nothing streamed meanwhile is missed
        history = await database_sync_to_async(self._history)(conversation_id)
        if history is None:
            await self._follow(None)
            raise NotFound("conversation", field="conversation_id")
        for message in history["messages"]:
            generation = message["generation"]
            if generation is not None and generation["state"] in ("queued", "running"):
                self.last_seq[generation["id"]] = generation["seq"]
        await self._reply(history, frame.request_id)

    def _history(self, conversation_id: str) -> dict | None:
        conversation = selectors.conversation_get(user=self.user, conversation_id=conversation_id)
        if conversation is None:
            return None
        messages_data = [message_data(m) for m in selectors.conversation_messages(conversation=conversation)]
        positions = selectors.queue_positions(model=settings.LLM_MODEL, limit=settings.CHAT_QUEUE_MAX)
        for message in messages_data:
            generation = message["generation"]
            if generation is not None and generation["state"] == "queued":
                generation["position"] = positions.get(_uuid(generation["id"]))
        return {"type": "history", "conversation": conversation_data(conversation), "messages": messages_data}

    async def on_rename(self, frame: Frame) -> None:
        conversation = await database_sync_to_async(services.conversation_rename)(
            user=self.user,
            conversation_id=uuid_field(frame.data, "conversation_id"),
            title=string_field(frame.data, "title"),
        )
        await self._conversation_changed(frame, conversation)

    async def on_settings(self, frame: Frame) -> None:
        conversation = await database_sync_to_async(services.conversation_settings_update)(
            user=self.user,
            conversation_id=uuid_field(frame.data, "conversation_id"),
            system_prompt=frame.data.get("system_prompt"),
            params=frame.data.get("params"),
        )
        await self._conversation_changed(frame, conversation)

    async def _conversation_changed(self, frame: Frame, conversation) -> None:
        event = {"type": "conversation", "conversation": conversation_data(conversation)}
        await self._reply(event, frame.request_id)
        await group_event(messages.conversation_group(conversation.id), event, skip_channel=self.channel_name)

    async def on_delete(self, frame: Frame) -> None:
        conversation_id = uuid_field(frame.data, "conversation_id")
        to_cancel = await database_sync_to_async(services.conversation_delete)(
            user=self.user, conversation_id=conversation_id
        )
        for generation_id, channel in to_cancel:
            await send_cancel(channel, generation_id)
        event = {"type": "deleted", "conversation_id": conversation_id}
        await group_event(messages.conversation_group(conversation_id), event, skip_channel=self.channel_name)
        if self.conversation_id == conversation_id:
            await self._follow(None)
        await self._reply(event, frame.request_id)

    async def on_cancel(self, frame: Frame) -> None:
        generation_id = uuid_field(frame.data, "generation_id")
        generation, channel = await database_sync_to_async(services.generation_cancel)(
            user=self.user, generation_id=generation_id
        )
        if channel is not None:
            await send_cancel(channel, generation.id)  # the worker sends `done` once it stopped
            return
        done = {"type": "done", "generation": await _data(generation_data, generation)}
        await self._reply(done, frame.request_id)
        if generation.conversation_id:
            await group_event(
                messages.conversation_group(generation.conversation_id), done, skip_channel=self.channel_name
            )

    async def on_resume(self, frame: Frame) -> None:
        generation_id = uuid_field(frame.data, "generation_id")
        non_negative_int_field(frame.data, "after_seq")
        owned = await database_sync_to_async(selectors.generation_get)(
            user=self.user, generation_id=generation_id
        )
        if owned is None:
            raise NotFound("generation", field="generation_id")
        if owned.conversation_id:  # an API request's answer streams over its HTTP response: a snapshot only
            await self._follow(str(owned.conversation_id))
        # Read after joining the group: every delta past this snapshot's seq will reach us.
        generation = await database_sync_to_async(selectors.generation_get)(
            user=self.user, generation_id=generation_id
        )
        data = await _data(generation_data, generation, position=await _position(generation))
        self.last_seq[data["id"]] = data["seq"]
        await self._reply({"type": "snapshot", "generation": data}, frame.request_id)
        if generation.is_final:
            await self._reply({"type": "done", "generation": data}, frame.request_id)

    # --- events out ------------------------------------------------------------------------------------------
    async def chat_event(self, message: dict) -> None:
        """A group event from a worker or another socket: forwarded in order (see the module docstring)."""
        if message.get("skip") == self.channel_name:
            return
        try:
            event = messages.unwrap_client_event(message)
        except messages.MessageFormatError:
            log.warning("dropped a malformed group event")
            return
        kind = event["type"]
        if kind == "delta":
            await self._forward_delta(event)
            return
        if kind == "generation":
            self.last_seq[event["generation"]["id"]] = 0
        elif kind == "done":
            self.last_seq.pop(event["generation"]["id"], None)
        elif kind == "deleted" and event.get("conversation_id") == self.conversation_id:
            await self._follow(None)
        await self._reply(event)

    async def _forward_delta(self, event: dict) -> None:
        generation_id, seq = event["generation_id"], event["seq"]
        last = self.last_seq.get(generation_id, 0)
        if seq <= last:
            return
        if seq == last + 1:
            self.last_seq[generation_id] = seq
            await self._reply(event)
            return
        # A gap (a delta was dropped): the row holds every delta up to this seq, so send it whole.
        generation = await database_sync_to_async(selectors.generation_get)(
            user=self.user, generation_id=generation_id
        )
        if generation is None:
            return
        data = await _data(generation_data, generation)
        self.last_seq[generation_id] = data["seq"]
        await self._reply({"type": "snapshot", "generation": data})

    # --- helpers ---------------------------------------------------------------------------------------------
    async def _follow(self, conversation_id: str | None) -> None:
        group = messages.conversation_group(conversation_id) if conversation_id else None
        await self._follow_group(group, conversation_id)

    async def _follow_group(self, group: str | None, conversation_id: str | None) -> None:
        if group != self.group:
            if self.group is not None:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            if group is not None:
                await self.channel_layer.group_add(group, self.channel_name)
            self.last_seq.clear()
        self.group = group
        self.conversation_id = conversation_id

    async def _reply(self, event: dict, request_id: str | None = None) -> None:
        if request_id is not None:
            event = {**event, "request_id": request_id}
        await self.send_json(event)

    async def send_json(self, content: dict) -> None:
        await self.send(text_data=json.dumps(content, ensure_ascii=False))


async def _data(fn, *args, **kwargs):
    return await database_sync_to_async(fn)(*args, **kwargs)


async def _position(generation) -> int | None:
    return await database_sync_to_async(selectors.queue_position)(generation=generation)


def _request_id_from_text(text: str) -> str | None:
    try:
        return request_id_of(json.loads(text))
    except (ValueError, RecursionError):
        return None


def _uuid(value: str) -> uuid.UUID:
    return uuid.UUID(value)
