"""What the engine hands back: a delta per request per step, and whole completions for LLM.generate."""

from __future__ import annotations

from dataclasses import dataclass, field

FINISH_REASONS = ("stop", "length", "abort", "error")


@dataclass
class RequestOutput:
    """One request's news from one step. `delta_text` may be "" while text is held back (a partial
    character, or the possible start of a stop string); the final output releases whatever is left."""

    request_id: str
    delta_text: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort" | "error" once finished
    num_prompt_tokens: int
    num_cached_prompt_tokens: int
    num_output_tokens: int
    error: str | None = None  # the message when finish_reason == "error"


@dataclass
class CompletionOutput:
    """A finished request as LLM.generate returns it."""

    request_id: str
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    num_cached_prompt_tokens: int = 0
    error: str | None = None
