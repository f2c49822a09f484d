"""`python -m chatapp.launcher` (make run) refuses bad configuration with one clear line, not a traceback.

Each case runs the real launcher as a process; none of them gets as far as starting a child, so nothing is left
running. A busy port is a real listening socket.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent


def run_launcher(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "LLM_MODEL", "PORT")
    }
    clean.update({"CHAT_VAR_DIR": str(tmp_path / "var"), **env})
    clean.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "chatapp.launcher"],
        cwd=BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PORT": "abc"}, "PORT: the port must be a number from 1 to 65535, got 'abc'"),
        ({"PORT": "99999"}, "PORT: the port must be a number from 1 to 65535, got '99999'"),
        ({"CHAT_MAX_TOKENS": "-1"}, "CHAT_MAX_TOKENS must be an integer >= 1, got '-1'"),
        ({"DATABASE_URL": "garbage"}, "DATABASE_URL is not a valid database URL"),
        ({"LOG_LEVEL": "loud"}, "LOG_LEVEL must be one of"),
    ],
)
def test_bad_setting_stops_start_up_with_one_clear_line(tmp_path, env, expected):
    done = run_launcher(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert f"could not start: {expected}" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_a_busy_port_is_named_and_nothing_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_launcher(tmp_path, PORT=str(port))
    assert done.returncode == 1
    assert f"could not start: cannot listen on 127.0.0.1:{port} (Address already in use)" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "var" / "redis" / "redis.sock").exists()


@pytest.mark.django_db
def test_health_probes_while_not_ready_are_not_logged_as_errors(client, caplog):
    """/health is polled several times a second while the worker loads; each 503 is not an ERROR line."""
    with caplog.at_level(logging.INFO, logger="django.request"):
        assert client.get("/health").status_code == 503  # no worker in this test
        assert client.get("/no-such-page-here").status_code == 404
    messages = [r.getMessage() for r in caplog.records if r.name == "django.request"]
    assert not any("/health" in m for m in messages), messages
    assert any("/no-such-page-here" in m for m in messages), messages  # other requests are still logged


def test_a_port_left_in_time_wait_by_a_stopped_run_is_free_again():
    """Right after a stop, the server's closed connections sit in TIME-WAIT for a minute; a restart must work."""
    from chatapp.launcher import LaunchError, _check_port_free

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    with pytest.raises(LaunchError, match="Address already in use"):
        _check_port_free("127.0.0.1", port)  # a live listener is refused
    served.close()  # the server closes first: its side of the connection goes to TIME-WAIT
    client.recv(1)
    client.close()
    listener.close()
    _check_port_free("127.0.0.1", port)
