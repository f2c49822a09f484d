"""Refuses prompts that cannot fit the model's context before they are queued (web side, no torch).

Counts tokens with the `tokenizers` library on the model's tokenizer.json when the model is a local folder that has
one, adding a few tokens per message for the chat template's markers. It is an early, cheap check: the worker's
engine validates the exact templated prompt again and fails the generation with a clear error if it does not fit.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from chatapp.errors import ContextTooLong

TEMPLATE_TOKENS_PER_MESSAGE = 4  # role markers and separators most chat templates add


@functools.lru_cache(maxsize=4)
def _tokenizer(model: str):
    path = Path(model) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # an unreadable tokenizer only disables the early check; the engine still validates
        return None


@functools.lru_cache(maxsize=4)
def model_max_context(model: str) -> int | None:
    """max_position_embeddings from a local model's config.json, when there is one."""
    path = Path(model) / "config.json"
    try:
        value = json.loads(path.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def count_prompt_tokens(model: str, prompt: dict) -> int | None:
    """An estimate of the prompt's length in tokens, or None when the model's tokenizer is not at hand."""
    tokenizer = _tokenizer(model)
    if tokenizer is None:
        return None
    if "messages" in prompt:
        messages = prompt["messages"]
        texts = [m["content"] for m in messages]
        overhead = TEMPLATE_TOKENS_PER_MESSAGE * (len(messages) + 1)
    else:
        texts = [prompt["prompt"]]
        overhead = 0
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False) if texts else []
    return overhead + sum(len(e.ids) for e in encodings)


def check_prompt_fits(*, model: str, max_context: int | None, prompt: dict, max_tokens: int) -> None:
    """Raises ContextTooLong when prompt + max_tokens surely exceeds the model's context."""
    if not max_context:
        max_context = model_max_context(model)
    if not max_context:
        return
    if max_tokens >= max_context:
        raise ContextTooLong(
            f"max_tokens {max_tokens} leaves no room for the prompt in the model's context of {max_context} tokens",
            field="params.max_tokens",
        )
    prompt_tokens = count_prompt_tokens(model, prompt)
    if prompt_tokens is None:
        return
    total = prompt_tokens + max_tokens
    if total > max_context:
        raise ContextTooLong(
            f"prompt (about {prompt_tokens} tokens) plus max_tokens ({max_tokens}) is {total} tokens, "
            f"beyond the model's context of {max_context} by {total - max_context}; "
            "start a new conversation, shorten the message or lower max_tokens"
        )
