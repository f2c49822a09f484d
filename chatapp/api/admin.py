"""API keys in the admin: admins create keys for any user (the secret is shown once) and revoke them; the list
shows each key's usage (calls, tokens) with a link to its generations. Registered by chatapp.admin."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, Sum
from django.http import HttpResponse
from django.template import RequestContext, Template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from chatapp.api import keys
from chatapp.models import ApiKey

CREATED_PAGE = (
    '{% extends "admin/base_site.html" %}{% block content %}'
    "<p>The new key <b>{{ key.name }}</b> for <b>{{ key.user }}</b>:</p>"
    '<p><input type="text" readonly size="70" value="{{ secret }}" id="new-api-key"></p>'
    "<p>Copy it now: it is shown only once and cannot be recovered.</p>"
    '<p><a href="{{ list_url }}">Back to the API keys</a></p>{% endblock %}'
)


class ApiKeyCreateForm(forms.ModelForm):
    """The add form: whose key and its name; the secret is made by chatapp.api.keys."""

    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True).order_by("username")
    )

    class Meta:
        model = ApiKey
        fields = ("user", "name")


class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "name", "user", "prefix", "created_at", "last_used_at", "revoked_at", "calls", "tokens", "generations_link",
    )  # fmt: skip
    list_filter = ("created_at", "revoked_at")
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)
    readonly_fields = ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_calls=Count("generations"),
                n_prompt=Sum("generations__prompt_tokens"),
                n_completion=Sum("generations__completion_tokens"),
            )
        )

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request, obj=None):
        return ("user", "name") if obj is None else self.readonly_fields

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a key is revoked (action), never edited

    def save_model(self, request, obj, form, change) -> None:
        row, secret = keys.api_key_create(user=form.cleaned_data["user"], name=form.cleaned_data["name"])
        obj.pk, obj.prefix, obj.created_at = row.pk, row.prefix, row.created_at
        request._new_api_key = (
            secret  # shown by response_add on this very page, never stored (not even in messages)
        )

    def response_add(self, request, obj, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "title": "API key created",
            "key": obj,
            "secret": request._new_api_key,
            "list_url": reverse("admin:chatapp_apikey_changelist"),
        }
        response = HttpResponse(Template(CREATED_PAGE).render(RequestContext(request, context)))
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected API keys", permissions=["delete"])
    def revoke(self, request, queryset) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} key(s).", messages.SUCCESS)

    @admin.display(description="calls", ordering="n_calls")
    def calls(self, key: ApiKey) -> int:
        return key.n_calls

    @admin.display(description="tokens (prompt + completion)")
    def tokens(self, key: ApiKey) -> str:
        return f"{key.n_prompt or 0} + {key.n_completion or 0}"

    @admin.display(description="generations")
    def generations_link(self, key: ApiKey) -> str:
        url = reverse("admin:chatapp_generation_changelist") + f"?api_key__id__exact={key.pk}"
        return format_html('<a href="{}">view</a>', url)
