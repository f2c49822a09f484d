"""HTTP routes. The web UI and the OpenAI-compatible API add their own includes here."""

from django.contrib import admin
from django.urls import include, path

from chatapp.api.key_page import api_keys_page
from chatapp.health import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", health, name="health"),
    path("v1/", include("chatapp.api.urls")),
    path("keys/", api_keys_page, name="api-keys"),
    path("", include("chatapp.web.urls")),
]
