"""Keeps "not ready yet" health probes out of the error log.

/health answers 503 while a worker is still loading its model; the launcher and load balancers poll it several
times a second, and Django logs every 5xx as an ERROR on `django.request`. The JSON answer is the report, so these
records are dropped; every other request's errors are logged as before. No Django imports: logging is configured
before the apps load.
"""

from __future__ import annotations

import logging

HEALTH_PATH = "/health"


class DropHealthProbes(logging.Filter):
    """Drops `django.request` records about a 503 from /health."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        path = getattr(request, "path", None)
        return not (path == HEALTH_PATH and getattr(record, "status_code", None) == 503)
