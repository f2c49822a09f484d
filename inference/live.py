"""Per-generation streaming state inside the worker, and the coalescing rule for deltas.

A generation's text grows with every engine step; deltas go out coalesced: its first text at once, then at most one
message per flush interval, and whatever is left when it ends. Pure Python (no Django, Redis or torch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

FINAL_STATE_BY_REASON = {"abort": "stopped", "error": "failed"}  # any other finish reason: "done"
# A model can write U+0000 (a byte-fallback token for byte 0, say), which PostgreSQL text cannot hold: the
# checkpoint would fail. It is shown as U+FFFD instead, in the stream and the stored text alike.
NUL, NUL_SHOWN_AS = "\x00", "\ufffd"


@dataclass
class LiveGeneration:
    """What the worker knows about one generation it is writing."""

    generation_id: str
    group: str | None  # a chat answer's conversation group, where its events go
    created_at_epoch: float  # the row's created_at, for time to first token as the user sees it
    reply_channel: str = ""  # an API request's: the relay channel of the web process streaming it
    text: str = ""
    seq: int = 0
    sent_len: int = 0  # characters of `text` already checkpointed and sent
    last_flush: float = 0.0  # monotonic time of the last delta
    first_token_epoch: float | None = None
    first_token_mono: float | None = None
    finished_mono: float | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    completion_tokens: int = 0
    finished: bool = False
    finish_reason: str = ""
    error: str = ""
    done_sent: bool = False
    extra: dict = field(default_factory=dict)

    def apply_output(self, out) -> None:
        """Folds one engine step output (see the engine's public interface) into this state."""
        if self.finished:
            return
        delta = (out.delta_text or "").replace(NUL, NUL_SHOWN_AS)
        if self.first_token_mono is None and (delta or out.new_token_ids):
            self.first_token_mono = time.monotonic()
            self.first_token_epoch = time.time()
        self.text += delta
        self.prompt_tokens = out.num_prompt_tokens
        self.cached_prompt_tokens = out.num_cached_prompt_tokens
        self.completion_tokens = out.num_output_tokens
        if out.finished:
            reason = out.finish_reason or "stop"
            error = getattr(out, "error", None) or ""
            if reason == "error" and not error:
                error = "The model failed while writing this answer."
            self.finish(reason, error=error)

    def finish(self, reason: str, *, error: str = "") -> None:
        if self.finished:
            return
        self.finished = True
        self.finish_reason = reason
        self.error = error
        self.finished_mono = time.monotonic()

    @property
    def final_state(self) -> str | None:
        if not self.finished:
            return None
        return FINAL_STATE_BY_REASON.get(self.finish_reason, "done")

    @property
    def pending_text(self) -> str:
        return self.text[self.sent_len :]

    def is_dirty(self) -> bool:
        return bool(self.pending_text) or (self.finished and not self.done_sent)

    def due_at(self, flush_interval: float) -> float | None:
        """Monotonic time this generation may next send, or None when it has nothing to send."""
        if not self.is_dirty():
            return None
        if self.finished or self.seq == 0:
            return 0.0  # the first text and the end go out at once
        return self.last_flush + flush_interval

    def stats(self) -> dict:
        stats = {
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if self.first_token_epoch is not None:
            stats["ttft_ms"] = max(0.0, (self.first_token_epoch - self.created_at_epoch) * 1000.0)
        if (
            self.finished_mono is not None
            and self.first_token_mono is not None
            and self.completion_tokens > 1
        ):
            elapsed = self.finished_mono - self.first_token_mono
            if elapsed > 0:
                stats["tokens_per_s"] = (self.completion_tokens - 1) / elapsed
        return {k: v for k, v in stats.items() if v is not None}
