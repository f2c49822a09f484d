"""LLM: the simple, blocking front of the engine for scripts, tests and benchmarks."""

from __future__ import annotations

import itertools
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

from .engine import LLMEngine
from .outputs import CompletionOutput
from .sampling_params import SamplingParams

Prompt = str | list[int]


def _as_prompt_list(prompts: Prompt | Seq[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    if not isinstance(prompts, Seq):
        raise ValueError(
            f"prompts must be a string, a list of token ids, or a list of those; got {prompts!r}"
        )
    if prompts and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
        return [list(prompts)]  # one prompt given as token ids
    return list(prompts)


class LLM:
    """`LLM(model, dtype="auto", device="auto", **engine_options)`; `.engine` is the LLMEngine underneath."""

    def __init__(self, model: str | Path, dtype: str = "auto", device: str = "auto", **engine_options: Any):
        self.engine = LLMEngine(model, dtype=dtype, device=device, **engine_options)
        self._ids = itertools.count()

    def generate(
        self,
        prompts: Prompt | Seq[Prompt],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        *,
        user_id: str | None = None,
    ) -> list[CompletionOutput]:
        """Run every prompt to completion (batched together); results in the order of `prompts`.

        It drives `self.engine.step()` itself, so it is not for an engine that another thread also steps.
        """
        items = _as_prompt_list(prompts)
        if params is None or isinstance(params, SamplingParams):
            per_prompt = [params or SamplingParams()] * len(items)
        else:
            per_prompt = list(params)
            if len(per_prompt) != len(items):
                raise ValueError(f"{len(per_prompt)} SamplingParams for {len(items)} prompts")
        results: dict[str, CompletionOutput] = {}
        order: list[str] = []
        try:
            for prompt, p in zip(items, per_prompt, strict=True):
                request_id = f"generate-{next(self._ids)}"
                self.engine.add_request(request_id, prompt=prompt, params=p, user_id=user_id)
                order.append(request_id)
                prompt_ids = self.engine.scheduler.get(request_id).prompt_token_ids
                results[request_id] = CompletionOutput(request_id, prompt_ids, "")
        except Exception:
            for request_id in order:
                self.engine.abort(request_id)
            self._drain(set(order), {})
            raise
        texts = self._drain(set(order), results)
        for request_id in order:
            results[request_id].text = "".join(texts[request_id])
        return [results[rid] for rid in order]

    def _drain(self, pending: set[str], results: dict[str, CompletionOutput]) -> dict[str, list[str]]:
        texts: dict[str, list[str]] = {rid: [] for rid in pending}
        while pending:
            for out in self.engine.step():
                if out.request_id not in pending:
                    continue
                texts[out.request_id].append(out.delta_text)
                if out.request_id in results:
                    res = results[out.request_id]
                    res.token_ids.extend(out.new_token_ids)
                    res.num_cached_prompt_tokens = out.num_cached_prompt_tokens
                    if out.finished:
                        res.finish_reason, res.error = out.finish_reason, out.error
                if out.finished:
                    pending.discard(out.request_id)
        return texts
