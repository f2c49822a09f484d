"""One request's state as the scheduler and block manager see it: tokens, progress and KV blocks."""

from __future__ import annotations

import enum
from typing import Any

from .sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Prompt and output token ids kept apart (the sampler's penalties read them separately).

    `num_computed_tokens` counts tokens whose KV is in the cache; the newest sampled token is not computed
    until the next step feeds it. `block_hashes[i]` is the chained hash of full block i, extended
    incrementally so no step rescans the history.
    """

    __slots__ = (
        "request_id",
        "user_id",
        "params",
        "arrival",
        "prompt_token_ids",
        "output_token_ids",
        "max_tokens",
        "status",
        "num_computed_tokens",
        "num_cached_prompt_tokens",
        "block_table",
        "block_hashes",
        "num_committed_blocks",
        "num_preemptions",
        "finish_reason",
        "error",
        "generator",
        "detokenizer",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        user_id: str | None = None,
        arrival: int = 0,
        max_tokens: int | None = None,
    ) -> None:
        if not prompt_token_ids:
            raise ValueError("the prompt must hold at least one token")
        self.request_id = request_id
        self.user_id = user_id
        self.params = params
        self.arrival = arrival
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.max_tokens = max_tokens if max_tokens is not None else params.max_tokens
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.num_cached_prompt_tokens = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []
        self.num_committed_blocks = 0
        self.num_preemptions = 0
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.generator: Any = None
        self.detokenizer: Any = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def token_slice(self, start: int, end: int) -> list[int]:
        """Token ids in [start, end) across prompt and output, without building the whole history."""
        n = len(self.prompt_token_ids)
        if end <= n:
            return self.prompt_token_ids[start:end]
        if start >= n:
            return self.output_token_ids[start - n : end - n]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - n]

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, user={self.user_id!r}, {self.status.value}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens}, blocks={len(self.block_table)})"
        )
