"""/v1 views (async, served by Daphne): thin; the work is in keys, validation, submit and stream.

CSRF-exempt: these views authenticate only by the Bearer key and never read the session, so a cookie from a
browser grants nothing here and cross-site forgery has nothing to ride on.
"""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from chatapp.api import config, database, stream
from chatapp.api.errors import ApiError, error_response
from chatapp.api.keys import api_key_authenticate
from chatapp.api.relay import get_relay
from chatapp.api.shapes import Envelope
from chatapp.api.submit import generation_submit, model_id
from chatapp.api.validation import CompletionRequest, parse_json_object, parse_request
from chatapp.models import ApiKey, Generation
from chatapp.notify import nudge_workers
from chatapp.selectors import current_model, workers_alive


def _authenticate(request: HttpRequest) -> ApiKey:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "Missing API key: send 'Authorization: Bearer sk-...'.", code="invalid_api_key")
    key = api_key_authenticate(token)
    if key is None:
        raise ApiError(401, "Incorrect or revoked API key.", code="invalid_api_key")
    return key


def _too_large() -> ApiError:
    return ApiError(
        413,
        f"The request body is larger than {config.API_MAX_BODY_BYTES} bytes.",
        code="request_too_large",
    )


def _read_body(request: HttpRequest) -> dict:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > config.API_MAX_BODY_BYTES:
        raise _too_large()
    try:
        raw = request.body
    except RequestDataTooBig:
        raise _too_large() from None
    if len(raw) > config.API_MAX_BODY_BYTES:
        raise _too_large()
    return parse_json_object(raw)


def _method_not_allowed(allowed: str) -> HttpResponse:
    response = error_response(ApiError(405, f"Use {allowed} on this endpoint.", code="method_not_allowed"))
    response["Allow"] = allowed
    return response


def _accept(
    request: HttpRequest, kind: str, reply_channel: str
) -> tuple[ApiKey, CompletionRequest, Generation]:
    """Key, body, parameters and the queued row, in one trip to the database thread (each trip costs a hop)."""
    api_key = _authenticate(request)
    body = _read_body(request)
    info = current_model()
    parsed = parse_request(body, kind, max_allowed_tokens=info.max_tokens_limit)
    row = generation_submit(api_key=api_key, request=parsed, info=info, reply_channel=reply_channel)
    return api_key, parsed, row


async def _completion(request: HttpRequest, kind: str) -> HttpResponse:
    if request.method != "POST":
        return _method_not_allowed("POST")
    try:
        reply_channel = await get_relay().channel_name()
        api_key, parsed, generation = await database.run(_accept, request, kind, reply_channel)
    except ApiError as err:
        return error_response(err)
    await nudge_workers()
    prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
    envelope = Envelope(
        kind, prefix + generation.id.hex, int(generation.created_at.timestamp()), model_id(generation.model)
    )
    if parsed.stream:
        body_iter = stream.stream(
            api_key=api_key, generation=generation, envelope=envelope, include_usage=parsed.include_usage
        )
        response = StreamingHttpResponse(body_iter, content_type="text/event-stream; charset=utf-8")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    status, payload = await stream.complete(api_key=api_key, generation=generation, envelope=envelope)
    return JsonResponse(payload, status=status)


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """POST /v1/chat/completions"""
    return await _completion(request, "chat")


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponse:
    """POST /v1/completions"""
    return await _completion(request, "text")


def _models_listing(request: HttpRequest) -> dict:
    _authenticate(request)
    info = current_model()
    started = {w.model: int(w.started_at.timestamp()) for w in workers_alive()}
    entry = {
        "id": model_id(info.name),
        "object": "model",
        "created": started.get(info.name, 0),
        "owned_by": "llmchat",
    }
    if info.max_context:
        entry["max_model_len"] = info.max_context
    return {"object": "list", "data": [entry]}


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    """GET /v1/models: the model this server serves."""
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed("GET")
    try:
        return JsonResponse(await database.run(_models_listing, request))
    except ApiError as err:
        return error_response(err)


@csrf_exempt
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other /v1 path: OpenAI's error JSON rather than an HTML 404 page."""
    return error_response(ApiError(404, f"Unknown endpoint {request.path}.", code="unknown_url"))
