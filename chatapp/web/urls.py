"""Routes of the browser pages (included at the site root by chatapp.urls)."""

from django.urls import path

from chatapp.web import static_files, views

urlpatterns = [
    path("", views.chat_page, name="chat"),
    path("c/<uuid:conversation_id>", views.chat_page, name="conversation"),
    path("signup/", views.signup_page, name="signup"),
    path("login/", views.LoginPage.as_view(), name="login"),
    path("logout/", views.LogoutPage.as_view(), name="logout"),
    path("static/<path:path>", static_files.static_file, name="static-file"),
]
