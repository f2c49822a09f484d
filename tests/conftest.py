"""Shared fixtures live in tests/fixtures/ (one module per real component) and are loaded here."""

pytest_plugins = [
    "tests.fixtures.models",
    "tests.fixtures.redis_server",
    "tests.fixtures.stack",
]
