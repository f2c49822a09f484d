"""Turn a request's prompt or chat messages into token ids, with the model's own tokenizer and chat template.

Torch-free: transformers' AutoTokenizer does the work (a fast tokenizer from tokenizer.json when the model has one).
Messages are rendered by the chat template as text and then encoded without extra special tokens, because the
template already writes every marker the model expects (BOS included, where it wants one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase


class TokenizerLoadError(RuntimeError):
    """The model folder has no usable tokenizer."""


def load_tokenizer(model_dir: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a model folder (or hub id, resolved through the local cache)."""
    from inference.engine.loader import resolve_model_dir  # the loader owns local/hub resolution

    path = resolve_model_dir(model_dir)
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for a broken folder
        raise TokenizerLoadError(f"could not load a tokenizer from {path}: {exc}") from exc


def _validate_messages(messages: object) -> list[dict[str, str]]:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ValueError(
            f"messages must be a list of {{'role': str, 'content': str}} dicts, got {type(messages).__name__}"
        )
    if not messages:
        raise ValueError("messages must not be empty")
    clean = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {type(msg).__name__}"
            )
        role, content = msg.get("role"), msg.get("content")
        if not isinstance(role, str) or not role.strip():
            raise ValueError(f"messages[{i}]['role'] must be a non-empty string, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}]['content'] must be a string, got {type(content).__name__}")
        clean.append({"role": role, "content": content})
    return clean


def _validate_token_ids(ids: Sequence[object], vocab_size: int) -> list[int]:
    out = []
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int):
            raise ValueError(f"prompt token ids must be integers; item {i} is {t!r}")
        if not 0 <= t < vocab_size:
            raise ValueError(
                f"prompt token id {t} at position {i} is outside the vocabulary [0, {vocab_size})"
            )
        out.append(t)
    return out


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[int] | None = None,
    messages: Sequence[dict[str, Any]] | None = None,
) -> list[int]:
    """Token ids for exactly one of: a text prompt, a list of token ids, or chat messages (+ generation prompt)."""
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt or messages")
    if messages is not None:
        clean = _validate_messages(messages)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("this model has no chat template; send a plain prompt instead of messages")
        try:
            text = tokenizer.apply_chat_template(clean, add_generation_prompt=True, tokenize=False)
        except Exception as exc:  # jinja's TemplateError, raise_exception() in templates, ...
            raise ValueError(f"the model's chat template rejected these messages: {exc}") from exc
        ids = tokenizer.encode(text, add_special_tokens=False)
    elif isinstance(prompt, str):
        ids = tokenizer.encode(prompt, add_special_tokens=True)
    elif isinstance(prompt, Sequence) and not isinstance(prompt, bytes):
        ids = _validate_token_ids(prompt, len(tokenizer))
    else:
        raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("the prompt is empty: it encodes to no tokens")
    return list(ids)


def _as_id_set(value: object) -> set[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, list | tuple):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, model_dir: str | Path | None = None) -> set[int]:
    """Every id that ends a generation: the tokenizer's eos plus those in config.json and generation_config.json.

    Chat models often end a turn with a token (say <|im_end|> or <|eot_id|>) that only generation_config lists.
    """
    ids = _as_id_set(tokenizer.eos_token_id)
    if model_dir is not None:
        for name in ("config.json", "generation_config.json"):
            path = Path(model_dir) / name
            if path.is_file():
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    raise TokenizerLoadError(f"could not read {path}: {exc}") from exc
                ids |= _as_id_set(data.get("eos_token_id"))
    return ids
