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


def test_a_redis_url_where_nothing_answers_is_named_before_anything_starts(tmp_path):
    with socket.socket() as closed, socket.socket() as web:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = closed.getsockname()[1]
        web.bind(("127.0.0.1", 0))
        web_port = str(web.getsockname()[1])
        web.close()  # a free port for the launcher's own check, which comes first
        done = run_launcher(tmp_path, REDIS_URL=f"redis://127.0.0.1:{port}/0", PORT=web_port)
        missing = run_launcher(tmp_path, REDIS_URL=f"unix://{tmp_path}/no.sock", PORT=web_port)
    assert done.returncode == 1
    assert (
        f"could not start: REDIS_URL: no Redis answers at 127.0.0.1:{port} (Connection refused)"
        in done.stderr
    )
    assert "Traceback" not in done.stderr + done.stdout
    assert missing.returncode == 1 and "REDIS_URL: no Redis answers at" in missing.stderr


def test_a_database_that_does_not_answer_is_named_in_one_line(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = closed.getsockname()[1]
        done = run_launcher(tmp_path, DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/llmchat")
    assert done.returncode == 1
    assert "could not start: DATABASE_URL: cannot connect to the database (connection failed" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_a_second_run_on_the_same_var_folder_leaves_the_first_ones_redis_alone(tmp_path):
    """It used to unlink the running Redis's socket and start its own there (both runs then broke)."""
    from chatapp.launcher import LaunchError, _redis_answers, start_redis

    first, _ = start_redis(tmp_path / "redis")
    try:
        with pytest.raises(LaunchError, match="another run uses this var/ folder"):
            start_redis(tmp_path / "redis")
        assert _redis_answers(tmp_path / "redis" / "redis.sock")
    finally:
        first.stop()
    (tmp_path / "redis" / "redis.sock").touch()  # a stale socket file left by a killed run is no obstacle
    second, _ = start_redis(tmp_path / "redis")
    second.stop()


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


def _children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for_line(log: Path, text: str, process: subprocess.Popen) -> None:
    """Waits until the launcher has printed `text` (a hang guard, not a timing assertion)."""
    import time

    deadline = time.monotonic() + 300
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"the launcher never printed {text!r}"
        time.sleep(0.5)


def _wait_for_worker(url: str, process: subprocess.Popen, not_pid: int | None) -> int:
    """The pid of a live worker that /health lists (other than `not_pid`); a hang guard, not a timing assertion."""
    import json
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, "the launcher exited"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                report = json.loads(response.read())
        except (OSError, ValueError):
            report = {}
        pids = [w["pid"] for w in report.get("workers", []) if w["pid"] != not_pid]
        if report.get("ok") and pids:
            return pids[0]
        time.sleep(0.5)
    raise AssertionError("no live worker reported by /health")


@pytest.mark.e2e
def test_a_killed_worker_is_started_again_and_ctrl_c_leaves_no_process(tmp_path):
    """On every interface (HOST=0.0.0.0) too: it probes and prints a loopback address it can be reached at."""
    import signal

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "LLM_MODEL")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("ALLOWED_HOSTS", None)
    env.update({"CHAT_VAR_DIR": str(tmp_path / "var"), "PORT": str(port), "HOST": "0.0.0.0"})
    log = open(tmp_path / "launcher.log", "wb")  # noqa: SIM115 - closed below
    launcher = subprocess.Popen(
        [sys.executable, "-m", "chatapp.launcher"],
        cwd=BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_line(tmp_path / "launcher.log", "Chat is running at", launcher)
        first = _wait_for_worker(url, launcher, None)
        children = _children_of(launcher.pid)
        assert first in children and len(children) == 3  # redis, worker, daphne
        os.kill(first, signal.SIGKILL)
        second = _wait_for_worker(url, launcher, first)
        assert second in _children_of(launcher.pid)
        children = _children_of(launcher.pid)
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(120) == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(30)
        log.close()
    output = (tmp_path / "launcher.log").read_text(errors="replace")
    assert f"Chat is running at http://127.0.0.1:{port}/" in output
    assert "set ALLOWED_HOSTS" in output
    assert "the worker exited with code -9; starting a new one" in output
    assert [pid for pid in children if _alive(pid)] == [], output[-2000:]
    assert not (tmp_path / "var" / "redis" / "redis.sock").exists()
