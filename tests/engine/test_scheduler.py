"""The scheduler without a model: chunk bound, decodes first, caps, preemption, fairness, abort."""

from inference.engine.block_manager import BlockManager
from inference.engine.sampling_params import SamplingParams
from inference.engine.scheduler import Scheduler, SchedulerOutput
from inference.engine.sequence import Sequence, SequenceStatus

BS = 4
_arrival = iter(range(10**9))


def make(num_blocks=64, max_num_seqs=8, budget=16, caching=True):
    return Scheduler(
        BlockManager(num_blocks, BS, caching), max_num_seqs=max_num_seqs, max_num_batched_tokens=budget
    )


def add(sched, rid, n_prompt, max_tokens=4, user="u", first=0):
    seq = Sequence(
        rid, list(range(first, first + n_prompt)), SamplingParams(), user_id=user, arrival=next(_arrival)
    )
    seq.max_tokens = max_tokens
    sched.add(seq)
    return seq


def step(sched) -> SchedulerOutput:
    """One step as the engine runs it, with a fake model whose next token is the sequence's length."""
    out = sched.schedule()
    assert out.num_batched_tokens == sum(s.num_tokens for s in out.scheduled) <= sched.max_num_batched_tokens
    sched.after_step(out.scheduled)
    for item in out.scheduled:
        if item.need_logits:
            seq = item.seq
            seq.append_token(1000 + seq.num_tokens)
            if seq.num_output_tokens >= seq.max_tokens:
                sched.finish(seq, "length")
    return out


def run_all(sched, limit=1000):
    steps = []
    while sched.has_unfinished():
        steps.append(step(sched))
        assert len(steps) < limit, "scheduler made no progress"
    return steps


def all_blocks_free(sched):
    bm = sched.block_manager
    return bm.num_free_blocks == bm.num_blocks and set(bm.ref_counts) == {0}


def test_long_prompt_is_chunked_and_never_stalls_running_decodes():
    sched = make(budget=8)
    short = add(sched, "short", 3, max_tokens=30)
    step(sched)  # short prefilled, now decoding
    long = add(sched, "long", 50, max_tokens=2)
    while long.num_output_tokens == 0:
        out = step(sched)
        assert out.num_batched_tokens <= 8
        ids = [s.seq.request_id for s in out.scheduled]
        assert ids[0] == "short" and out.scheduled[0].num_tokens == 1  # the decode goes first, every step
        chunk = [s for s in out.scheduled if s.seq is long]
        assert chunk and chunk[0].num_tokens <= 7
    assert short.num_output_tokens >= 7  # one token per step while the long prompt was chunked
    run_all(sched)
    assert all_blocks_free(sched)


def test_need_logits_only_on_the_last_chunk():
    sched = make(budget=8)
    seq = add(sched, "a", 20)
    flags = []
    while seq.num_output_tokens == 0:
        out = step(sched)
        flags.append(out.scheduled[0].need_logits)
    assert flags == [False, False, True]


def test_max_num_seqs_caps_running_and_the_rest_wait_in_order():
    sched = make(max_num_seqs=2, budget=64)
    for i in range(4):
        add(sched, f"r{i}", 3, max_tokens=3, user=f"user{i}")
    step(sched)
    assert [s.request_id for s in sched.running] == ["r0", "r1"]
    assert [s.request_id for s in sched.waiting_order()] == ["r2", "r3"]
    for _ in range(3):
        assert sched.num_running <= 2
        step(sched)
    run_all(sched)
    assert all_blocks_free(sched)


def test_fair_share_admits_the_user_with_fewest_running_first():
    sched = make(max_num_seqs=3, budget=64)
    for i in range(4):
        add(sched, f"a{i}", 3, max_tokens=10, user="alice")
    add(sched, "b0", 3, max_tokens=10, user="bob")
    add(sched, "c0", 3, max_tokens=10, user="carol")
    assert [s.request_id for s in sched.waiting_order()] == ["a0", "b0", "c0", "a1", "a2", "a3"]
    step(sched)
    assert sorted(s.request_id for s in sched.running) == ["a0", "b0", "c0"]
    sched.finish(sched.get("b0"), "abort")
    step(sched)
    assert sorted(s.request_id for s in sched.running) == ["a0", "a1", "c0"]


def test_pool_exhaustion_preempts_the_newest_and_recompute_finishes_everyone():
    sched = make(num_blocks=6, max_num_seqs=4, budget=64, caching=False)
    seqs = [add(sched, f"r{i}", 6, max_tokens=8, user=f"u{i}") for i in range(3)]
    steps = run_all(sched)
    assert sum(len(s.preempted) for s in steps) > 0
    assert all(s.num_output_tokens == 8 and s.finish_reason == "length" for s in seqs)
    assert seqs[2].num_preemptions > 0 and seqs[0].num_preemptions == 0
    # the fake model's next token depends only on length, so recompute must not change any output
    assert all(s.output_token_ids == [1000 + 6 + k for k in range(8)] for s in seqs)
    assert all_blocks_free(sched)


def test_preempted_sequence_recomputes_from_its_cached_blocks():
    sched = make(num_blocks=6, max_num_seqs=4, budget=64, caching=True)
    add(sched, "old", 9, max_tokens=10, user="a")
    young = add(sched, "young", 9, max_tokens=10, user="b", first=500)
    recompute_starts = []
    while sched.has_unfinished():
        out = step(sched)
        recompute_starts += [s.start_pos for s in out.scheduled if s.seq is young and young.num_preemptions]
    assert young.num_preemptions > 0 and young.num_output_tokens == 10
    assert recompute_starts and recompute_starts[0] > 0  # some of its blocks came back from the cache
    assert all_blocks_free(sched)


def test_preemption_never_leaves_a_preempted_sequence_in_the_plan():
    sched = make(num_blocks=5, max_num_seqs=4, budget=64, caching=False)
    for i in range(3):
        add(sched, f"r{i}", 5, max_tokens=12, user=f"u{i}")
    while sched.has_unfinished():
        out = step(sched)
        for item in out.scheduled:
            assert item.seq.status in (SequenceStatus.RUNNING, SequenceStatus.FINISHED)
            assert item.seq not in out.preempted
        assert len({id(i.seq) for i in out.scheduled}) == len(out.scheduled)
    assert all_blocks_free(sched)


def test_abort_in_every_state_frees_every_block():
    sched = make(num_blocks=64, budget=8)
    waiting = add(sched, "waiting", 5)
    prefill = add(sched, "prefill", 30)
    step(sched)  # waiting is admitted first and prefilled whole; prefill gets a partial chunk
    decoding = waiting
    assert decoding.num_output_tokens == 1 and 0 < prefill.num_computed_tokens < 30
    queued = add(sched, "queued", 5)
    for seq in (queued, prefill, decoding):
        sched.finish(seq, "abort")
        assert seq.is_finished and seq.block_table == [] and seq.finish_reason == "abort"
    assert not sched.has_unfinished() and all_blocks_free(sched)


def test_next_turn_hits_the_prefix_cache():
    sched = make()
    first = add(sched, "turn1", 10, max_tokens=3)
    run_all(sched)
    history = first.prompt_token_ids + first.output_token_ids
    turn2 = Sequence("turn2", history + [7, 7, 7], SamplingParams(), arrival=next(_arrival))
    turn2.max_tokens = 2
    sched.add(turn2)
    out = step(sched)
    assert turn2.num_cached_prompt_tokens == 12
    assert out.scheduled[0].start_pos == 12 and out.scheduled[0].num_tokens == 4
    run_all(sched)
    assert all_blocks_free(sched)
