"""The Django project and its chat app: settings, routing, models, services, consumers, admin."""
