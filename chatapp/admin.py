"""Admin panel: browse every user's conversations (messages inline) and each answer's generation, read-only.

Chat history is written by services only, so the admin shows it and never edits it: conversations and generations
can be searched (by user and text) and filtered (date, state, model), and deleted when needed.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from chatapp.api.admin import ApiKeyAdmin
from chatapp.models import ApiKey, Conversation, Generation, Message, Worker


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewing and deleting only: rows are written by chatapp.services."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class MessageInline(admin.TabularInline):
    model = Message
    fields = ("created_at", "role", "content", "generation_link")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("created_at", "id")
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="generation")
    def generation_link(self, message: Message) -> str:
        generation = message.generation
        if generation is None:
            return "-"
        url = reverse("admin:chatapp_generation_change", args=[generation.id])
        return format_html('<a href="{}">{} ({})</a>', url, generation.state, generation.model)


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("title", "user", "created_at", "updated_at", "message_count")
    list_filter = ("created_at", "updated_at", "generations__state", "generations__model")
    search_fields = ("title", "user__username", "user__email", "messages__content", "system_prompt")
    date_hierarchy = "created_at"
    list_select_related = ("user",)
    fields = ("id", "user", "title", "system_prompt", "params", "created_at", "updated_at")
    readonly_fields = fields
    inlines = [MessageInline]

    @admin.display(description="messages")
    def message_count(self, conversation: Conversation) -> int:
        return conversation.messages.count()

    def get_search_results(self, request, queryset, search_term):
        queryset, _duplicates = super().get_search_results(request, queryset, search_term)
        return queryset.distinct(), False

    def get_queryset(self, request):
        return super().get_queryset(request).distinct()


@admin.register(Generation)
class GenerationAdmin(ReadOnlyAdmin):
    list_display = (
        "id", "user", "source", "state", "model", "completion_tokens", "ttft_ms", "tokens_per_s", "finish_reason",
        "created_at",
    )  # fmt: skip
    list_filter = ("state", "source", "model", "finish_reason", "created_at")
    search_fields = ("id", "user__username", "text", "error", "conversation__title")
    date_hierarchy = "created_at"
    list_select_related = ("user",)
    fieldsets = (
        (None, {"fields": ("id", "user", "conversation", "source", "api_key", "model", "state", "finish_reason", "error")}),
        ("Prompt and parameters", {"fields": ("prompt", "params")}),
        ("Answer", {"fields": ("text", "seq")}),
        ("Tokens and timings", {"fields": (
            "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "ttft_ms", "tokens_per_s",
            "created_at", "started_at", "finished_at",
        )}),
        ("Worker", {"fields": ("worker", "lease_expires_at", "cancel_requested")}),
    )  # fmt: skip
    readonly_fields = [f for _name, options in fieldsets for f in options["fields"]]


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = (
        "hostname",
        "pid",
        "model",
        "is_demo",
        "running",
        "capacity",
        "last_heartbeat",
        "stopped_at",
    )
    list_filter = ("is_demo", "model")
    readonly_fields = (
        "id", "channel_name", "hostname", "pid", "model", "is_demo", "max_context", "capacity", "running",
        "started_at", "last_heartbeat", "stopped_at",
    )  # fmt: skip


# API keys: admins create (secret shown once) and revoke them, with usage per key (chatapp.api.admin).
admin.site.register(ApiKey, ApiKeyAdmin)
