"""Queue one API request as a Generation row (source=api), after every check that can refuse it.

Order: the model must be the served one (404), a worker must be alive (503), the key must be under its concurrency
limit (429), then chatapp.services.generation_create checks the queue bound (429) and the context (400) and writes
the row. Nothing is queued unless all of them pass.
"""

from __future__ import annotations

import math
from pathlib import Path

from django.db import transaction

from chatapp import errors, services
from chatapp.api import config
from chatapp.api.errors import ApiError
from chatapp.api.validation import CompletionRequest
from chatapp.models import ApiKey, Generation
from chatapp.prompt_check import count_prompt_tokens
from chatapp.selectors import ModelInfo, current_model


def model_id(name: str) -> str:
    """The name clients use for a model: a local model folder's name ("demo-model"), or the hub id as is."""
    path = Path(name)
    return path.name if path.is_absolute() else name


def served_model(requested: str, info: ModelInfo) -> ModelInfo:
    """The served model if `requested` names it (404 otherwise), with a live worker (503 otherwise)."""
    if requested not in (model_id(info.name), info.name):
        raise ApiError(
            404,
            f"The model {requested!r} does not exist; this server serves {model_id(info.name)!r} (GET /v1/models).",
            param="model",
            code="model_not_found",
        )
    if not info.alive:
        raise ApiError(
            503,
            "No inference worker is running; try again later.",
            type="server_error",
            code="no_worker",
            retry_after=5,
        )
    return info


def _prompt_of(request: CompletionRequest) -> dict:
    if request.kind == "chat":
        return {"messages": request.messages}
    return {"prompt": request.prompt}


def _params(request: CompletionRequest, prompt: dict, info: ModelInfo) -> dict:
    """The sampling kwargs, with max_tokens defaulting to what is left of the context (as OpenAI does)."""
    params = dict(request.sampling)
    if "max_tokens" not in params:
        limit = info.max_tokens_limit
        used = count_prompt_tokens(info.name, prompt)
        if used is not None and info.max_context:
            limit = min(limit, info.max_context - used)
        params["max_tokens"] = max(1, limit)
    return params


def _as_api_error(exc: errors.ApplicationError, prompt_param: str) -> ApiError:
    if isinstance(exc, errors.Busy):
        retry = max(1, math.ceil(exc.retry_after or 1))
        return ApiError(
            429, exc.message, type="rate_limit_error", code="rate_limit_exceeded", retry_after=retry
        )
    if isinstance(exc, errors.NoWorker):
        return ApiError(503, exc.message, type="server_error", code="no_worker", retry_after=5)
    if isinstance(exc, errors.ContextTooLong):
        param = "max_tokens" if exc.field == "params.max_tokens" else prompt_param
        return ApiError(400, exc.message, param=param, code="context_length_exceeded")
    param = (exc.field or "").removeprefix("params.") or None
    return ApiError(400, exc.message, param=param, code=exc.code)


def generation_submit(
    *, api_key: ApiKey, request: CompletionRequest, info: ModelInfo | None = None, reply_channel: str = ""
) -> Generation:
    """Writes the queued row for this request, or raises ApiError; the caller nudges the workers afterwards.

    `reply_channel` is the relay channel of the web process that streams the answer (chatapp.api.relay).
    """
    info = served_model(request.model, info or current_model())
    prompt = _prompt_of(request)
    params = _params(request, prompt, info)
    try:
        with transaction.atomic():
            # Serialises one key's requests on PostgreSQL, so two at once cannot both pass the limit.
            ApiKey.objects.select_for_update().filter(pk=api_key.pk).first()
            active = Generation.objects.filter(api_key=api_key, state__in=Generation.ACTIVE_STATES).count()
            if active >= config.API_MAX_CONCURRENT_PER_KEY:
                raise ApiError(
                    429,
                    f"This key has {active} requests in progress (the limit is "
                    f"{config.API_MAX_CONCURRENT_PER_KEY}); wait for one to finish.",
                    type="rate_limit_error",
                    code="rate_limit_exceeded",
                    retry_after=1,
                )
            return services.generation_create(
                user=api_key.user,
                prompt=prompt,
                params=params,
                source=Generation.Source.API,
                api_key=api_key,
                reply_channel=reply_channel,
                model=info,
            )
    except errors.ApplicationError as exc:
        raise _as_api_error(exc, "messages" if request.kind == "chat" else "prompt") from None


def generation_abandon(*, api_key: ApiKey, generation_id) -> str | None:
    """Cancels a generation whose client went away; returns the worker channel to tell, if it is running."""
    try:
        _row, channel = services.generation_cancel(user=api_key.user, generation_id=generation_id)
    except errors.NotFound:
        return None
    return channel
