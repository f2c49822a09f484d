"""Settings come from the environment; a malformed value stops start-up with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.env import ConfigError, env_bool, env_float, env_int, env_list, env_origins, redis_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("CHAT_MAX_MESSAGE_CHARS", "lots", "CHAT_MAX_MESSAGE_CHARS must be an integer"),
        (
            "CHAT_MAX_CONCURRENT_PER_USER",
            "0",
            "CHAT_MAX_CONCURRENT_PER_USER must be an integer >= 1, got '0'",
        ),
        ("WORKER_LEASE_SECONDS", "nan", "WORKER_LEASE_SECONDS must be a number in"),
        ("DEBUG", "maybe", "DEBUG must be a boolean"),
        ("WORKER_ENGINE_PROCESS", "sometimes", "WORKER_ENGINE_PROCESS must be a boolean"),
        ("REDIS_URL", "localhost:6379", "REDIS_URL must be a redis://"),
        ("CSRF_TRUSTED_ORIGINS", "chat.example.com", "CSRF_TRUSTED_ORIGINS entries must start with http"),
        ("SECRET_KEY", "short", "SECRET_KEY must be at least 32 characters"),
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL must be one of"),
        ("DATABASE_POOL_SIZE", "0", "DATABASE_POOL_SIZE must be an integer in [1, 1000]"),
    ],
)
def test_bad_environment_stops_start_up_naming_the_variable(tmp_path, name, value, expected):
    env = {
        **os.environ,
        "CHAT_VAR_DIR": str(tmp_path),
        name: value,
        "DJANGO_SETTINGS_MODULE": "chatapp.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert expected in done.stderr


def test_defaults_need_no_configuration(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "LLM_MODEL", "SECRET_KEY")
    }
    env.update(CHAT_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="chatapp.settings")
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['NAME'], s.REDIS_URL, s.LLM_MODEL, s.LLM_MODEL_IS_DEMO, s.DEBUG)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    database, redis, model, is_demo, debug = done.stdout.split()
    assert database == str(tmp_path / "db.sqlite3")
    assert redis == f"unix://{tmp_path / 'redis' / 'redis.sock'}"
    assert model == str(tmp_path / "demo-model") and is_demo == "True" and debug == "False"
    key = (tmp_path / "secret_key").read_text()  # a development key generated once, private to this folder
    assert len(key) >= 50 and (tmp_path / "secret_key").stat().st_mode & 0o077 == 0


def test_env_readers(monkeypatch):
    monkeypatch.setenv("X_INT", " 12 ")
    monkeypatch.setenv("X_BOOL", "Yes")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    monkeypatch.setenv("X_FLOAT", "0.5")
    monkeypatch.setenv("X_BLANK", "  ")
    assert env_int("X_INT", 1, minimum=1) == 12
    assert env_bool("X_BOOL", False) is True
    assert env_list("X_LIST", []) == ["a", "b", "c"]
    assert env_float("X_FLOAT", 1.0, minimum=0.1) == 0.5
    assert env_int("X_BLANK", 7) == 7  # blank means unset
    assert env_origins("X_UNSET_ORIGINS") == []
    assert redis_url("X_UNSET_REDIS", "unix:///tmp/r.sock") == "unix:///tmp/r.sock"
    with pytest.raises(ConfigError, match="X_INT must be an integer >= 20, got '12'"):
        env_int("X_INT", 1, minimum=20)


def test_web_processes_never_import_torch(tmp_path):
    """The ASGI application, the consumers, the API and the admin load without torch (only the worker loads it)."""
    env = {**os.environ, "CHAT_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "chatapp.settings"}
    code = (
        "import sys, django; django.setup(); import chatapp.asgi, chatapp.admin, chatapp.consumers, chatapp.urls; "
        "from django.urls import get_resolver; get_resolver().url_patterns; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _connection_settings(tmp_path, **env_vars) -> subprocess.CompletedProcess:
    """A fresh process's database settings as a web process has them, then as the worker sets them."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_CONN_MAX_AGE")}
    env.update(CHAT_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="chatapp.settings", **env_vars)
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "from chatapp.db import keep_connection_open; "
        "d = s.DATABASES['default']; print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'], d['OPTIONS'].get('pool')); "
        "keep_connection_open(s.DATABASE_CONN_MAX_AGE); "
        "print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'], d['OPTIONS'].get('pool'))"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "60 True None"), ("0", "0 True None"), ("soon", None), ("-1", None)]
)
def test_only_the_worker_keeps_its_connection_for_database_conn_max_age(tmp_path, value, expected):
    env_vars = {} if value is None else {"DATABASE_CONN_MAX_AGE": value}
    done = _connection_settings(tmp_path, **env_vars)
    if expected is None:
        assert done.returncode != 0 and "DATABASE_CONN_MAX_AGE must be an integer" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["0 True None", expected]


def test_web_processes_borrow_postgres_connections_from_a_pool_the_worker_does_not_use(tmp_path):
    done = _connection_settings(
        tmp_path, DATABASE_URL="postgres://chat@db.invalid:5432/chat", DATABASE_POOL_SIZE="4"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "0 True {'min_size': 1, 'max_size': 4, 'timeout': 10}",
        "60 True None",
    ]
