"""LLMEngine: one step = schedule -> one forward pass -> sample -> detokenize, for every request at once.

Other threads may add, abort and inspect requests while `step()` runs: a lock guards the bookkeeping (never
held during the forward pass), and an abort of a request that is in the running forward pass takes effect
right after it. A step that raises ends only the requests that were in it, with finish_reason "error".
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

import torch

from .block_manager import BlockManager
from .config import EngineConfig
from .detokenizer import IncrementalDetokenizer, make_decoder
from .device import resolve_device, resolve_dtype
from .loader import resolve_model_dir
from .model_runner import ForwardItem, ModelRunner
from .outputs import RequestOutput
from .sampler import Sampler, SamplingRow
from .sampling_params import SamplingParams
from .scheduler import ScheduledSeq, Scheduler
from .sequence import Sequence
from .tokenizer import encode_prompt, eos_token_ids, load_tokenizer


class LLMEngine:
    """Serves many requests at once; see issue 2 for the public contract."""

    def __init__(self, model: str | Path, dtype: str = "auto", device: str = "auto", **engine_options: Any):
        self.config = EngineConfig.from_options(model, dtype=dtype, device=device, **engine_options)
        cfg = self.config
        self.device = resolve_device(cfg.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        self.model_dir = resolve_model_dir(cfg.model)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.runner = ModelRunner(
            self.model_dir,
            dtype=self.dtype,
            device=self.device,
            block_size=cfg.block_size,
            kv_cache_memory=cfg.kv_cache_memory,
            num_kv_blocks=cfg.num_kv_blocks,
            max_model_len=cfg.max_model_len,
        )
        self.max_model_len: int = self.runner.max_model_len
        self.vocab_size: int = int(self.runner.hf_config.vocab_size)
        self.block_manager = BlockManager(self.runner.num_blocks, cfg.block_size, cfg.enable_prefix_caching)
        self.scheduler = Scheduler(
            self.block_manager,
            max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
        )
        self.sampler = Sampler()
        self.eos_token_ids = frozenset(eos_token_ids(self.tokenizer, self.model_dir))
        self._decoder = make_decoder(self.tokenizer)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._tokenizer_lock = threading.Lock()  # the tokenizer is shared by add_request and step threads
        self._step_lock = threading.Lock()
        self._arrivals = itertools.count()
        self._reported: list[RequestOutput] = []  # finishes outside a step, reported by the next step
        self._in_flight: set[str] = set()
        self._abort_after_step: set[str] = set()

    # --- requests ------------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt: str | Seq[int] | None = None,
        *,
        messages: Seq[dict[str, Any]] | None = None,
        params: SamplingParams | None = None,
        user_id: str | int | None = None,
    ) -> int:
        """Validate, tokenize and queue a request; return its prompt length. Raises ValueError if invalid."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty string, got {request_id!r}")
        if params is None:
            params = SamplingParams()
        elif not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        if user_id is not None and (isinstance(user_id, bool) or not isinstance(user_id, str | int)):
            raise ValueError(f"user_id must be a string, an integer or None, got {user_id!r}")
        with self._tokenizer_lock:
            ids = encode_prompt(self.tokenizer, prompt=prompt, messages=messages)
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise ValueError(
                f"prompt token id {bad} is outside the model's vocabulary [0, {self.vocab_size})"
            )
        max_tokens = self._check_length(len(ids), params.max_tokens)
        seq = Sequence(request_id, ids, params, user_id=user_id, max_tokens=max_tokens)
        if params.seed is not None:
            seq.generator = torch.Generator(device=self.device).manual_seed(params.seed)
        seq.detokenizer = IncrementalDetokenizer(self._decoder, params.stop)
        with self._work:
            seq.arrival = next(self._arrivals)
            self.scheduler.add(seq)  # raises ValueError on a duplicate id
            self._work.notify_all()
        return len(ids)

    def _check_length(self, num_prompt: int, max_tokens: int | None) -> int:
        limit = self.max_model_len
        if num_prompt >= limit:
            raise ValueError(
                f"the prompt has {num_prompt} tokens but the model's context length is {limit} tokens "
                f"(and at least one must be left to generate): {num_prompt - limit + 1} too many"
            )
        if max_tokens is None:  # as long as the context and the KV pool allow
            pool_tokens = self.block_manager.num_blocks * self.block_manager.block_size
            max_tokens = max(1, min(limit, pool_tokens) - num_prompt)
        total = num_prompt + max_tokens
        if total > limit:
            raise ValueError(
                f"the prompt ({num_prompt} tokens) plus max_tokens ({max_tokens}) is {total} tokens, over the "
                f"model's context length of {limit} by {total - limit}; lower max_tokens to {limit - num_prompt}"
            )
        needed = self.block_manager.blocks_for(total)
        if needed > self.block_manager.num_blocks:
            raise ValueError(
                f"the prompt plus max_tokens ({total} tokens) needs {needed} KV cache blocks but the cache holds "
                f"{self.block_manager.num_blocks} (of {self.block_manager.block_size} tokens): over by "
                f"{needed - self.block_manager.num_blocks} blocks; lower max_tokens or give the cache more memory"
            )
        return max_tokens

    def abort(self, request_id: str) -> bool:
        """Stop a request in any state and free its blocks (right after the running step, if it is in it).

        Returns False when no such request is unfinished. Its final output (finish_reason "abort") comes
        from the next `step()`.
        """
        with self._work:
            seq = self.scheduler.get(request_id)
            if seq is None:
                return False
            if request_id in self._in_flight:
                self._abort_after_step.add(request_id)
            else:
                self._reported.append(self._finish(seq, "abort"))
            self._work.notify_all()
            return True

    def queue_positions(self) -> dict[str, int]:
        """{request_id: 1-based position} of requests waiting for a slot, in the order they would get one."""
        with self._lock:
            return {s.request_id: i + 1 for i, s in enumerate(self.scheduler.waiting_order())}

    # --- state for a driver thread ------------------------------------------------------------------
    def has_unfinished_requests(self) -> bool:
        with self._lock:
            return self.scheduler.has_unfinished() or bool(self._reported)

    def num_running(self) -> int:
        with self._lock:
            return self.scheduler.num_running

    def num_waiting(self) -> int:
        with self._lock:
            return self.scheduler.num_waiting

    def num_free_slots(self) -> int:
        """How many more requests would start at once (max_num_seqs minus running and waiting)."""
        with self._lock:
            busy = self.scheduler.num_running + self.scheduler.num_waiting
            return max(0, self.config.max_num_seqs - busy)

    def wait_for_work(self, timeout: float | None = None) -> bool:
        """Block until `step()` has something to do (or `timeout` seconds pass); True if it has."""
        with self._work:
            return self._work.wait_for(
                lambda: self.scheduler.has_unfinished() or bool(self._reported), timeout
            )

    # --- one step ------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one batched forward pass; return the news of every request that has some."""
        if not self._step_lock.acquire(blocking=False):
            raise RuntimeError("step() is already running in another thread; drive an engine from one thread")
        try:
            return self._step()
        finally:
            self._step_lock.release()

    def _step(self) -> list[RequestOutput]:
        with self._lock:
            outputs, self._reported = self._reported, []
            plan = self.scheduler.schedule()
            if not plan:
                return outputs
            self._in_flight = {s.seq.request_id for s in plan.scheduled}
        try:
            tokens, sampled = self._forward(plan.scheduled)
        except Exception as exc:  # isolate the fault: only this step's requests fail
            message = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._end_in_flight(outputs)
                outputs.extend(
                    self._finish(s.seq, "error", message) for s in plan.scheduled if not s.seq.is_finished
                )
            return outputs
        with self._lock:
            self._end_in_flight(outputs)
            self.scheduler.after_step(plan.scheduled)
            with self._tokenizer_lock:
                for item, token in zip(sampled, tokens, strict=True):
                    if not item.seq.is_finished:
                        outputs.append(self._accept_token(item.seq, token))
        return outputs

    def _end_in_flight(self, outputs: list[RequestOutput]) -> None:
        """The forward pass is over: carry out the aborts that arrived during it."""
        self._in_flight = set()
        for request_id in self._abort_after_step:
            seq = self.scheduler.get(request_id)
            if seq is not None:
                outputs.append(self._finish(seq, "abort"))
        self._abort_after_step.clear()

    def _forward(self, scheduled: list[ScheduledSeq]) -> tuple[list[int], list[ScheduledSeq]]:
        items = [
            ForwardItem(
                token_ids=s.seq.token_slice(s.start_pos, s.start_pos + s.num_tokens),
                start_pos=s.start_pos,
                block_table=s.seq.block_table,
                need_logits=s.need_logits,
            )
            for s in scheduled
        ]
        logits = self.runner.execute(items)
        sampled = [s for s in scheduled if s.need_logits]
        rows = [
            SamplingRow(s.seq.params, s.seq.generator, s.seq.prompt_token_ids, s.seq.output_token_ids)
            for s in sampled
        ]
        return self.sampler(logits, rows), sampled

    def _accept_token(self, seq: Sequence, token: int) -> RequestOutput:
        try:
            seq.append_token(token)
            params, detok = seq.params, seq.detokenizer
            reason = None
            if token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids):
                reason, delta = "stop", ""
            else:
                delta = detok.add(token)
                if detok.stopped:
                    reason = "stop"
            if reason is None and (
                seq.num_output_tokens >= seq.max_tokens or seq.num_tokens >= self.max_model_len
            ):
                reason = "length"
            if reason is not None:
                delta += detok.flush()
                self.scheduler.finish(seq, reason)
        except Exception as exc:  # a detokenizer fault ends this request only
            return self._finish(seq, "error", f"{type(exc).__name__}: {exc}", new_token_ids=[token])
        return self._output(seq, delta, [token])

    def _finish(
        self, seq: Sequence, reason: str, error: str | None = None, new_token_ids: list[int] | None = None
    ) -> RequestOutput:
        self.scheduler.finish(seq, reason, error)
        return self._output(seq, "", new_token_ids or [])

    @staticmethod
    def _output(seq: Sequence, delta: str, new_token_ids: list[int]) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            delta_text=delta,
            new_token_ids=new_token_ids,
            finished=seq.is_finished,
            finish_reason=seq.finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_prompt_tokens=seq.num_cached_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            error=seq.error,
        )
