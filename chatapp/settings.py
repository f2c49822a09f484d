"""Django settings, all from the environment with embedded defaults (see README "Configuration").

Defaults make a fresh clone run with no configuration: SQLite and a Redis socket under var/, the demo model under
var/demo-model, a development secret key generated once into var/. Production sets DATABASE_URL, REDIS_URL,
LLM_MODEL, SECRET_KEY, ALLOWED_HOSTS and CSRF_TRUSTED_ORIGINS.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import dj_database_url

from chatapp.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_origins,
    env_str,
    redis_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CHAT_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else a development key generated once into var/ (never a shipped one)."""
    key = env_str("SECRET_KEY", None)
    if key is not None:
        if len(key) < 32:
            raise ConfigError("SECRET_KEY must be at least 32 characters long")
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_origins("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "chatapp",
    "inference",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "chatapp.urls"
ASGI_APPLICATION = "chatapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


POOL_TIMEOUT_S = 10


def _database() -> dict:
    """The connection settings of web processes; the worker keeps its connection instead
    (chatapp.db.keep_connection_open), and so do the API's database threads on SQLite (chatapp.db.DatabaseThreads).

    Web processes close their connection after every request or call: Django runs each HTTP request's database
    calls in a thread of its own, so a connection kept for reuse is never reused and stays open until garbage
    collection (84 idle PostgreSQL connections after 150 API requests, measured), which is why Django says to
    disable persistent connections under ASGI. On PostgreSQL they borrow from a bounded pool instead of
    connecting each time. Health checks drop a connection the server closed meanwhile.
    """
    url = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
    pool_size = env_int("DATABASE_POOL_SIZE", 10, minimum=1, maximum=1000)
    try:
        config = dj_database_url.parse(url, conn_max_age=0, conn_health_checks=True)
    except Exception as exc:  # dj_database_url raises several types for a bad URL
        raise ConfigError(f"DATABASE_URL is not a valid database URL ({exc}): {url!r}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # Worker and web write concurrently: WAL, a busy timeout, and write locks taken at BEGIN.
        config["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # A request waits at most POOL_TIMEOUT_S for a connection (all busy, or the server down), then fails.
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": pool_size,
            "timeout": POOL_TIMEOUT_S,
        }
    return config


DATABASES = {"default": _database()}
# Threads that keep their connection (the worker's, the API's: chatapp.db) keep it this many seconds (0: never).
DATABASE_CONN_MAX_AGE = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = redis_url("REDIS_URL", f"unix://{VAR_DIR / 'redis' / 'redis.sock'}")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 reads with a 5 s socket timeout by default, the same as channels_redis' blocking
            # receive (BZPOPMIN 5 s): idle receivers then fail with TimeoutError. Give reads more room.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15, "socket_connect_timeout": 5}],
            # A socket follows a few answers at <= 1 delta per flush interval each; 500 gives a slow client
            # seconds of slack before deltas drop (it then gets a snapshot). Workers' own channels take nudges
            # from every queued answer, hence the larger bound.
            "capacity": env_int("CHAT_CHANNEL_CAPACITY", 500, minimum=10),
            "channel_capacity": {"inference-worker*": 5000},
            "expiry": 30,
        },
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
LOGIN_URL = "login"  # the site's own log-in page (the admin keeps its own)

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# --- The model -------------------------------------------------------------------------------------------------
# LLM_MODEL: a local Hugging Face model folder or hub id. Unset: the demo model (random weights), built on first run.
LLM_MODEL_IS_DEMO = env_str("LLM_MODEL", None) is None
LLM_MODEL = env_str("LLM_MODEL", str(VAR_DIR / "demo-model"))
LLM_DTYPE = env_str("LLM_DTYPE", "auto")
LLM_DEVICE = env_str("LLM_DEVICE", "auto")
LLM_MAX_NUM_SEQS = env_int("LLM_MAX_NUM_SEQS", 32, minimum=1, maximum=4096)
LLM_KV_CACHE_MB = env_int("LLM_KV_CACHE_MB", 0, minimum=0)  # 0: the engine's default budget

# --- Chat limits ----------------------------------------------------------------------------------------------
CHAT_MAX_MESSAGE_CHARS = env_int("CHAT_MAX_MESSAGE_CHARS", 8000, minimum=1, maximum=1_000_000)
CHAT_MAX_SYSTEM_PROMPT_CHARS = env_int("CHAT_MAX_SYSTEM_PROMPT_CHARS", 4000, minimum=0, maximum=1_000_000)
CHAT_DEFAULT_MAX_TOKENS = env_int("CHAT_DEFAULT_MAX_TOKENS", 256, minimum=1)
CHAT_MAX_TOKENS = env_int("CHAT_MAX_TOKENS", 4096, minimum=1)
CHAT_MAX_CONCURRENT_PER_USER = env_int("CHAT_MAX_CONCURRENT_PER_USER", 3, minimum=1)
CHAT_RATE_PER_MINUTE = env_int("CHAT_RATE_PER_MINUTE", 30, minimum=1)
CHAT_QUEUE_MAX = env_int("CHAT_QUEUE_MAX", 256, minimum=1)

# --- Worker -----------------------------------------------------------------------------------------------------
WORKER_FLUSH_MS = env_int("WORKER_FLUSH_MS", 40, minimum=1, maximum=5000)
WORKER_LEASE_SECONDS = env_float("WORKER_LEASE_SECONDS", 30.0, minimum=1.0, maximum=3600.0)
WORKER_SWEEP_SECONDS = env_float("WORKER_SWEEP_SECONDS", 2.0, minimum=0.05, maximum=600.0)
WORKER_CAPACITY = env_int("WORKER_CAPACITY", 0, minimum=0)  # 0: the engine's max_num_seqs
# The engine steps in a child process of the worker, so it never waits for the GIL behind the worker's I/O.
# False: in a thread of the worker (one process less; the step then slows under load, see the README).
WORKER_ENGINE_PROCESS = env_bool("WORKER_ENGINE_PROCESS", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"drop_health_probes": {"()": "chatapp.health_log.DropHealthProbes"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django.request": {"filters": ["drop_health_probes"]}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR")),
    },
}
