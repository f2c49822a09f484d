"""`python manage.py inference_worker`: load the model into one engine and serve queued generations.

Model and engine options come from settings (LLM_MODEL, LLM_DTYPE, LLM_DEVICE, LLM_MAX_NUM_SEQS, LLM_KV_CACHE_MB,
WORKER_CAPACITY, WORKER_ENGINE_PROCESS); with LLM_MODEL unset the demo model is built under var/ first. The engine
runs in a child process unless WORKER_ENGINE_PROCESS is off; if that process dies, the worker exits non-zero.
SIGINT/SIGTERM stop it cleanly: the answers it was writing turn failed with a message, so none stays "running".
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def ensure_demo_model(path: Path) -> Path:
    """Builds the demo model into `path` unless it is there already (no torch needed)."""
    if not (path / "config.json").is_file():
        from inference.demo import build_demo_model

        build_demo_model(path)
    return path


def model_flags(model: str) -> tuple[bool, int | None]:
    """(is_demo, max_position_embeddings) read from a local model folder's config.json."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return settings.LLM_MODEL_IS_DEMO, None
    return bool(config.get("llmchat_demo")) or settings.LLM_MODEL_IS_DEMO, config.get(
        "max_position_embeddings"
    )


def build_engine(model: str):
    """The engine for `model` with the options from settings: in a child process (WORKER_ENGINE_PROCESS, the
    default; torch is imported only there) or an LLMEngine in this process."""
    options = {
        "dtype": settings.LLM_DTYPE,
        "device": settings.LLM_DEVICE,
        "max_num_seqs": settings.LLM_MAX_NUM_SEQS,
    }
    if settings.LLM_KV_CACHE_MB:
        options["kv_cache_memory"] = settings.LLM_KV_CACHE_MB * 1024 * 1024
    if settings.WORKER_ENGINE_PROCESS:
        from inference.engine_process import EngineProcess

        return EngineProcess(model, **options)
    from inference.engine import LLMEngine

    return LLMEngine(model, **options)


def engine_max_context(engine, fallback: int | None) -> int:
    for owner in (getattr(engine, "config", None), getattr(engine, "model_runner", None), engine):
        value = getattr(owner, "max_model_len", None) if owner is not None else None
        if isinstance(value, int) and value > 0:
            return value
    if fallback:
        return fallback
    raise CommandError(
        "cannot tell the model's context length (no max_model_len on the engine, none in config)"
    )


class Command(BaseCommand):
    help = "Run the inference worker: one engine batching every queued answer, streamed over Redis."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--capacity", type=int, default=None, help="most answers written at once")

    def handle(self, *args, **options) -> None:
        from chatapp.db import keep_connection_open

        keep_connection_open(settings.DATABASE_CONN_MAX_AGE)
        model = settings.LLM_MODEL
        if settings.LLM_MODEL_IS_DEMO:
            ensure_demo_model(Path(model))
        is_demo, config_context = model_flags(model)
        capacity = options["capacity"] or settings.WORKER_CAPACITY or settings.LLM_MAX_NUM_SEQS
        if capacity < 1:
            raise CommandError("--capacity must be >= 1")
        from inference.engine_process import EngineStartError

        try:
            engine = build_engine(model)
        except EngineStartError as exc:
            raise CommandError(str(exc)) from exc
        except (ValueError, OSError) as exc:
            raise CommandError(f"cannot load model {model!r}: {exc}") from exc
        try:
            failure = asyncio.run(
                self._serve(engine, model, is_demo, engine_max_context(engine, config_context), capacity)
            )
        finally:
            if hasattr(engine, "close"):
                engine.close()
        if failure is not None:  # exit non-zero, so a supervisor restarts the worker
            raise CommandError(f"the worker stopped: {failure}")

    async def _serve(
        self, engine, model: str, is_demo: bool, max_context: int, capacity: int
    ) -> BaseException | None:
        from inference.worker import InferenceWorker

        worker = InferenceWorker(
            engine, model_name=model, is_demo=is_demo, max_context=max_context, capacity=capacity
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        self.stdout.write(
            f"inference worker: model {model} ({'demo' if is_demo else 'configured'}), capacity {capacity}"
        )
        await worker.run()
        self.stdout.write("inference worker stopped")
        return worker.engine_failure
