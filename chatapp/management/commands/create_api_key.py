"""`python manage.py create_api_key USERNAME [--name NAME]`: prints a new API key for scripts (shown once)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from chatapp.api import keys


class Command(BaseCommand):
    help = "Create an API key for USERNAME and print it (only its hash is stored; it cannot be shown again)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--name", default="created by create_api_key", help="a label shown in the key list"
        )

    def handle(self, *args, username: str, name: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive.")
        try:
            _row, secret = keys.api_key_create(user=user, name=name)
        except keys.ApiKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(secret)
