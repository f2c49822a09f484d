"""/v1 routes (included under "v1/" by chatapp.urls)."""

from django.urls import path, re_path

from chatapp.api import views

urlpatterns = [
    path("chat/completions", views.chat_completions, name="api-chat-completions"),
    path("completions", views.completions, name="api-completions"),
    path("models", views.models, name="api-models"),
    re_path(r"^(?P<rest>.*)$", views.not_found),
]
