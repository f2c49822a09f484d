"""OpenAI's response and stream-chunk objects, built from what a finished or streaming generation holds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

Kind = Literal["chat", "text"]

# The engine ends a sequence with "stop" | "length" | "abort" | "error". "abort" (cancelled by its owner or an
# admin) is passed through as vLLM does; OpenAI's clients accept any string there.
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}


@dataclass(frozen=True)
class Usage:
    """Token counts of one generation, as the row records them."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    def as_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True)
class Envelope:
    """What every object of one response shares: its id, creation time and model name."""

    kind: Kind
    id: str
    created: int
    model: str

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def completion(self, text: str, finish_reason: str | None, usage: Usage) -> dict:
        """The whole answer of a non-streaming request."""
        reason = FINISH_REASONS.get(finish_reason or "", "stop")
        if self.kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": reason,
            }
            return {**self._head("chat.completion"), "choices": [choice], "usage": usage.as_dict()}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        return {**self._head("text_completion"), "choices": [choice], "usage": usage.as_dict()}

    def chunk(
        self,
        text: str | None,
        finish_reason: str | None = None,
        *,
        role: bool = False,
        with_usage: bool = False,
    ) -> dict:
        """One stream chunk: new text, or the final one carrying the finish reason."""
        reason = FINISH_REASONS.get(finish_reason, "stop") if finish_reason else None
        if self.kind == "chat":
            delta: dict = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            obj = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
            obj = {**self._head("text_completion"), "choices": [choice]}
        if with_usage:
            obj["usage"] = None
        return obj

    def usage_chunk(self, usage: Usage) -> dict:
        """The extra last chunk that stream_options.include_usage asks for: no choices, the usage."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage.as_dict()}


def sse(obj: dict) -> bytes:
    """One server-sent event holding a JSON object."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
