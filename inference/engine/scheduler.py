"""Decides each step's work: decodes first, then prefill chunks under a token budget, fair across users.

When the KV pool runs out, the newest running sequence is preempted (its blocks freed, its tokens
recomputed later, mostly from the prefix cache) instead of failing anyone.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSeq:
    """`num_tokens` tokens of `seq` to compute from `start_pos`; sample after them when `need_logits`."""

    seq: Sequence
    start_pos: int
    num_tokens: int
    need_logits: bool

    @property
    def is_prefill(self) -> bool:
        return self.num_tokens > 1 or self.start_pos < self.seq.num_prompt_tokens


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    num_batched_tokens: int = 0  # kept in step with `scheduled`, so the budget check is O(1)

    def __bool__(self) -> bool:
        return bool(self.scheduled)


class Scheduler:
    def __init__(
        self, block_manager: BlockManager, *, max_num_seqs: int, max_num_batched_tokens: int
    ) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []  # in admission order: the last is preempted first
        self._by_id: dict[str, Sequence] = {}
        self._running_per_user: Counter[str | None] = Counter()

    # --- requests in and out -------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        if seq.request_id in self._by_id:
            raise ValueError(f"request id {seq.request_id!r} is already in use")
        seq.status = SequenceStatus.WAITING
        self._by_id[seq.request_id] = seq
        self.waiting.append(seq)

    def get(self, request_id: str) -> Sequence | None:
        return self._by_id.get(request_id)

    def finish(self, seq: Sequence, reason: str, error: str | None = None) -> None:
        """End `seq` in whatever state it is and give its blocks back at once."""
        if seq.is_finished:
            return
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self._running_per_user[seq.user_id] -= 1
        else:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.error = error
        del self._by_id[seq.request_id]

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)

    def waiting_order(self) -> list[Sequence]:
        """Waiting sequences in the order they would be admitted now: fewest running per user, then arrival.

        A heap over users (not over requests) keeps this O(W log U), so it is cheap to ask every step.
        """
        queues: dict[str | None, list[Sequence]] = {}
        for seq in sorted(self.waiting, key=lambda s: s.arrival):
            queues.setdefault(seq.user_id, []).append(seq)
        heap = [(self._running_per_user[u], q[0].arrival, i, u) for i, (u, q) in enumerate(queues.items())]
        heapq.heapify(heap)
        heads = dict.fromkeys(queues, 0)
        order: list[Sequence] = []
        while heap:
            count, _, i, user = heapq.heappop(heap)
            queue = queues[user]
            order.append(queue[heads[user]])
            heads[user] += 1
            if heads[user] < len(queue):
                heapq.heappush(heap, (count + 1, queue[heads[user]].arrival, i, user))
        return order

    # --- one step ------------------------------------------------------------------------------
    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self._running_per_user[seq.user_id] -= 1
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.append(seq)
        out.preempted.append(seq)
        out.scheduled = [s for s in out.scheduled if s.seq is not seq]
        out.num_batched_tokens = sum(s.num_tokens for s in out.scheduled)

    def _reserve(self, seq: Sequence, want: int, out: SchedulerOutput) -> int:
        """Blocks for up to `want` tokens of running `seq`, preempting newer sequences if none fit.

        Returns how many tokens fit (0 if `seq` itself had to be preempted).
        """
        while True:
            fit = min(want, self.block_manager.max_new_tokens(seq))
            if fit > 0:
                self.block_manager.allocate(seq, fit)
                return fit
            victim = self.running[-1]
            self._preempt(victim, out)
            if victim is seq:
                return 0

    def _admit_next(self, budget: int, out: SchedulerOutput) -> Sequence | None:
        counts = self._running_per_user
        seq = min(self.waiting, key=lambda s: (counts[s.user_id], s.arrival))
        bm = self.block_manager
        hit = bm.match_prefix(seq)
        want = min(budget, seq.num_tokens - seq.num_computed_tokens)
        if not bm.allocate(seq, want):
            fit = min(want, bm.max_new_tokens(seq))
            if fit < min(want, bm.block_size) or not bm.allocate(seq, fit):
                bm.free(seq)  # give the prefix blocks back: it waits for room
                return None
            want = fit
        if seq.num_preemptions == 0:
            seq.num_cached_prompt_tokens = min(hit, seq.num_prompt_tokens)
        self.waiting.remove(seq)
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        counts[seq.user_id] += 1
        self._add(out, seq, want)
        return seq

    @staticmethod
    def _add(out: SchedulerOutput, seq: Sequence, n: int) -> None:
        start = seq.num_computed_tokens
        out.scheduled.append(ScheduledSeq(seq, start, n, start + n == seq.num_tokens))
        out.num_batched_tokens += n

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        limit = self.max_num_batched_tokens
        decoding = [s for s in self.running if s.num_tokens - s.num_computed_tokens == 1]
        prefilling = [s for s in self.running if s.num_tokens - s.num_computed_tokens > 1]
        for phase in (decoding, prefilling):
            for seq in phase:
                budget = limit - out.num_batched_tokens
                if budget <= 0:
                    break
                if seq.status is not SequenceStatus.RUNNING:
                    continue  # preempted earlier in this step
                n = self._reserve(seq, min(budget, seq.num_tokens - seq.num_computed_tokens), out)
                if n:
                    self._add(out, seq, n)
        if not out.preempted:  # a pool that just ran dry takes no newcomers this step
            while self.waiting and len(self.running) < self.max_num_seqs:
                budget = limit - out.num_batched_tokens
                if budget <= 0 or self._admit_next(budget, out) is None:
                    break
        return out

    def after_step(self, scheduled: list[ScheduledSeq]) -> None:
        """Record that the scheduled tokens' KV is now written, and publish newly full blocks."""
        for item in scheduled:
            seq = item.seq
            if seq.is_finished:
                continue
            seq.num_computed_tokens = item.start_pos + item.num_tokens
            self.block_manager.commit(seq)
