"""HTTP routes. The web UI and the OpenAI-compatible API add their own includes here."""

from django.contrib import admin
from django.urls import include, path

from chatapp.health import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", health, name="health"),
    path("", include("chatapp.web.urls")),
]
