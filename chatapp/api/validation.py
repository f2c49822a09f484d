"""Turn a /v1 request body into a checked CompletionRequest, or a 400 naming the parameter and why.

Unknown fields are ignored (as OpenAI-compatible servers such as vLLM do, so clients that send newer fields keep
working); fields we know but cannot honour (n > 1, tools, logprobs, ...) are refused, never silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from chatapp.frames import has_nul

from .errors import ApiError, bad_param
from .sampling import sampling_kwargs

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_USER_CHARS = 256


@dataclass(frozen=True)
class CompletionRequest:
    """One validated request: what to generate (chat messages or a raw prompt), how, and how to answer."""

    kind: Literal["chat", "text"]
    model: str
    stream: bool
    include_usage: bool
    sampling: dict[str, Any]
    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    user: str | None = field(default=None)


def parse_json_object(raw: bytes) -> dict:
    """The request body as a JSON object."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"The body is not valid JSON: {exc}.", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "The body is nested too deeply.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_json")
    if has_nul(body):
        raise ApiError(400, "Strings must not contain the NUL character (U+0000).", code="invalid_json")
    return body


def _refuse_unsupported(body: dict) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_param("n", "Only n=1 is supported: send one request per completion.")
    best_of = body.get("best_of")
    if best_of is not None and best_of != 1:
        raise bad_param("best_of", "Only best_of=1 is supported.")
    for name in ("tools", "functions", "logit_bias"):
        if body.get(name):
            raise bad_param(name, f"'{name}' is not supported by this server.")
    for name in ("tool_choice", "function_call"):
        if body.get(name) not in (None, "none"):
            raise bad_param(name, f"'{name}' is not supported by this server (no tools).")
    logprobs = body.get("logprobs")
    if logprobs is not None and logprobs is not False:
        raise bad_param("logprobs", "'logprobs' is not supported by this server.")
    if body.get("top_logprobs") is not None:
        raise bad_param("top_logprobs", "'top_logprobs' is not supported by this server.")
    if body.get("echo"):
        raise bad_param("echo", "'echo' is not supported by this server.")
    if body.get("suffix"):
        raise bad_param("suffix", "'suffix' is not supported by this server.")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad_param("response_format", "Only response_format {'type': 'text'} is supported.")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad_param("modalities", "Only the 'text' modality is supported.")


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad_param(
                    f"{where}.content[{i}]",
                    "Only text content parts ({'type': 'text', 'text': ...}) are supported.",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise bad_param(f"{where}.content", "'content' must be a string or a list of text parts.")


def _messages(body: dict) -> list[dict[str, str]]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad_param("messages", "'messages' must be a non-empty list of {role, content} objects.")
    out = []
    for i, msg in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise bad_param(where, "Each message must be an object with 'role' and 'content'.")
        role = msg.get("role")
        if role not in ROLES:
            raise bad_param(f"{where}.role", f"Unsupported role {role!r}: use system, user or assistant.")
        out.append({"role": ROLES[role], "content": _content_text(msg.get("content"), where)})
    return out


def _prompt(body: dict) -> str:
    raw = body.get("prompt")
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        raw = raw[0]
    if not isinstance(raw, str):
        raise bad_param("prompt", "'prompt' must be a string (or a list holding exactly one string).")
    if not raw:
        raise bad_param("prompt", "'prompt' must not be empty.")
    return raw


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_param("stream", "'stream' must be true or false.")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_param("stream_options", "'stream_options' is only allowed when 'stream' is true.")
    if not isinstance(options, dict):
        raise bad_param("stream_options", "'stream_options' must be an object.")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad_param("stream_options.include_usage", "'include_usage' must be true or false.")
    return stream, include_usage


def parse_request(body: dict, kind: Literal["chat", "text"], *, max_allowed_tokens: int) -> CompletionRequest:
    """Check every field of a chat (kind="chat") or legacy completions (kind="text") body."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param("model", "'model' is required: the name of a model from GET /v1/models.")
    _refuse_unsupported(body)
    stream, include_usage = _stream_flags(body)
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER_CHARS):
        raise bad_param("user", f"'user' must be a string of at most {MAX_USER_CHARS} characters.")
    sampling = sampling_kwargs(body, max_allowed_tokens=max_allowed_tokens)
    if kind == "chat":
        return CompletionRequest(
            kind, model, stream, include_usage, sampling, messages=_messages(body), user=user
        )
    return CompletionRequest(kind, model, stream, include_usage, sampling, prompt=_prompt(body), user=user)
