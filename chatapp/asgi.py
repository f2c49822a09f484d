"""ASGI entry point: `chatapp.asgi:application` (HTTP through Django, websockets through Channels)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")
django_asgi_app = get_asgi_application()

# Routing imports models and consumers, so it must come after Django is set up.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chatapp.api.handler import ApiHandler, is_api_path  # noqa: E402
from chatapp.origin import SameOriginValidator  # noqa: E402
from chatapp.routing import websocket_urlpatterns  # noqa: E402

api_asgi_app = ApiHandler()


async def http_app(scope, receive, send):
    """/v1 to the API's lean handler (chatapp.api.handler), everything else to Django with its full middleware."""
    app = api_asgi_app if is_api_path(scope["path"]) else django_asgi_app
    await app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
