"""Chat history and inference jobs. Every answer is a Generation row; chatapp.services does every write."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Conversation(models.Model):
    """One chat thread of one user, with the settings later answers use."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, blank=True, default="")
    system_prompt = models.TextField(blank=True, default="")
    params = models.JSONField(default=dict, blank=True)  # {"temperature", "top_p", "max_tokens"}
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["user", "-updated_at"], name="conv_user_recent")]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Worker(models.Model):
    """A running inference worker process; its heartbeat says it is alive."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    channel_name = models.CharField(max_length=200)
    hostname = models.CharField(max_length=200, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    model = models.CharField(max_length=500)
    is_demo = models.BooleanField(default=False)
    max_context = models.IntegerField(default=0)
    capacity = models.IntegerField(default=0)
    running = models.IntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid} ({self.model})"


class ApiKey(models.Model):
    """A key for the OpenAI-compatible API; only a hash of its secret is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=32, unique=True)
    hashed_secret = models.CharField(max_length=256)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class Generation(models.Model):
    """One answer being made: a job row claimed by a worker under a lease, with its text checkpointed."""

    class Source(models.TextChoices):
        CHAT = "chat"
        API = "api"

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        STOPPED = "stopped"
        FAILED = "failed"

    FINAL_STATES = (State.DONE, State.STOPPED, State.FAILED)
    ACTIVE_STATES = (State.QUEUED, State.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="generations")
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="generations"
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.CHAT)
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="generations"
    )
    model = models.CharField(max_length=500, blank=True, default="")
    state = models.CharField(max_length=8, choices=State.choices, default=State.QUEUED)
    prompt = models.JSONField()  # {"messages": [{"role", "content"}, ...]} or {"prompt": "..."}
    params = models.JSONField(default=dict)  # SamplingParams keyword arguments
    text = models.TextField(blank=True, default="")
    seq = models.IntegerField(default=0)  # number of deltas checkpointed so far
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="generations"
    )
    # API requests: the relay channel of the web process streaming the answer (chatapp.api.relay); chat answers
    # go to their conversation's group instead.
    reply_channel = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    prompt_tokens = models.IntegerField(null=True, blank=True)
    cached_prompt_tokens = models.IntegerField(null=True, blank=True)
    completion_tokens = models.IntegerField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)
    finish_reason = models.CharField(max_length=16, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The queue: oldest queued first; leases to expire; a user's active answers and recent rate.
            models.Index(fields=["state", "created_at"], name="gen_queue"),
            models.Index(fields=["state", "lease_expires_at"], name="gen_lease"),
            models.Index(fields=["user", "state"], name="gen_user_state"),
            models.Index(fields=["user", "created_at"], name="gen_user_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.state})"

    @property
    def is_final(self) -> bool:
        return self.state in self.FINAL_STATES


class Message(models.Model):
    """A turn in a conversation. An assistant message's text lives in its generation until the answer ends."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    generation = models.OneToOneField(
        Generation, null=True, blank=True, on_delete=models.SET_NULL, related_name="message"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["conversation", "created_at"], name="msg_conv_time")]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"
