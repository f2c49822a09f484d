"""The KV block pool without a model: allocation, prefix hits, eviction and reference counts."""

import pytest

from inference.engine.block_manager import BlockManager
from inference.engine.sampling_params import SamplingParams
from inference.engine.sequence import Sequence

BS = 4


def seq(tokens, rid="r"):
    return Sequence(rid, list(tokens), SamplingParams())


def compute(bm: BlockManager, s: Sequence, n: int | None = None) -> None:
    """What a step does: reserve blocks, then (after the forward pass) mark tokens computed and commit."""
    n = s.num_tokens - s.num_computed_tokens if n is None else n
    assert bm.allocate(s, n)
    s.num_computed_tokens += n
    bm.commit(s)


def test_allocation_takes_whole_blocks_and_free_returns_them():
    bm = BlockManager(8, BS)
    s = seq(range(10))
    assert bm.allocate(s, 10)
    assert len(s.block_table) == 3 and bm.num_free_blocks == 5
    assert all(bm.ref_counts[b] == 1 for b in s.block_table)
    bm.free(s)
    assert s.block_table == [] and bm.num_free_blocks == 8 and set(bm.ref_counts) == {0}


def test_allocation_fails_cleanly_when_the_pool_is_short():
    bm = BlockManager(2, BS)
    s = seq(range(9))
    assert not bm.allocate(s, 9)
    assert s.block_table == [] and bm.num_free_blocks == 2
    assert bm.max_new_tokens(s) == 8


def test_prefix_hit_shares_full_blocks_and_leaves_one_token_to_compute():
    bm = BlockManager(16, BS)
    a = seq(range(10), "a")
    compute(bm, a)
    assert bm.num_cached_blocks == 2  # two full blocks; the partial third is not published
    b = seq([*range(8), 99, 98], "b")
    assert bm.match_prefix(b) == 8
    assert b.block_table == a.block_table[:2]
    assert [bm.ref_counts[x] for x in b.block_table] == [2, 2]
    exact = seq(range(8), "c")  # fully cached prompt: its last block is recomputed for the logits
    assert bm.match_prefix(exact) == 4


def test_different_prefix_same_block_tokens_is_a_miss_because_hashes_chain():
    bm = BlockManager(16, BS)
    compute(bm, seq([1, 2, 3, 4, 5, 6, 7, 8, 0], "a"))
    other = seq([9, 9, 9, 9, 5, 6, 7, 8, 0], "b")
    assert bm.match_prefix(other) == 0


def test_freed_hashed_blocks_stay_reusable_until_evicted_lru():
    bm = BlockManager(4, BS)
    a = seq(range(9), "a")
    compute(bm, a)
    bm.free(a)
    assert bm.num_free_blocks == 4 and bm.num_cached_blocks == 2
    again = seq(range(9), "a2")
    assert bm.match_prefix(again) == 8 and again.num_cached_prompt_tokens == 0
    bm.free(again)
    # a stranger needs every block: the cached ones are evicted (plain ones go first)
    big = seq(range(100, 116), "big")
    assert bm.allocate(big, 16)
    assert bm.num_cached_blocks == 0 and bm.num_free_blocks == 0
    bm.free(big)
    assert bm.match_prefix(seq(range(9), "a3")) == 0


def test_eviction_takes_the_least_recently_freed_tail_first():
    bm = BlockManager(5, BS)
    a = seq(range(13), "a")  # three full blocks, one partial
    compute(bm, a)
    bm.free(a)
    assert bm.allocate(seq(range(50, 55), "x"), 5)  # two plain blocks: never used, and a's partial one
    assert bm.allocate(seq([60], "y"), 1)  # evicts a's last full block first
    assert bm.match_prefix(seq(range(13), "a2")) == 8


def test_duplicate_content_is_not_double_registered_and_ref_counts_balance():
    bm = BlockManager(16, BS)
    a, b = seq(range(9), "a"), seq(range(9), "b")
    compute(bm, a)
    compute(bm, b)  # computed separately (no match): same hashes, own blocks
    assert bm.num_cached_blocks == 2
    bm.free(a)
    bm.free(b)
    assert set(bm.ref_counts) == {0} and bm.num_free_blocks == 16


def test_prefix_match_on_a_sequence_holding_blocks_is_refused():
    bm = BlockManager(16, BS)
    s = seq(range(9))
    bm.allocate(s, 9)
    with pytest.raises(RuntimeError, match="already holds blocks"):
        bm.match_prefix(s)


def test_prefix_caching_off_never_matches():
    bm = BlockManager(16, BS, enable_prefix_caching=False)
    compute(bm, seq(range(9), "a"))
    assert bm.num_cached_blocks == 0
    assert bm.match_prefix(seq(range(9), "b")) == 0


def test_incremental_hashes_match_a_fresh_computation():
    bm = BlockManager(32, BS)
    s = seq(range(5), "s")
    compute(bm, s)
    for t in range(20):
        s.append_token(100 + t)
        compute(bm, s)
    fresh = seq(s.prompt_token_ids + s.output_token_ids, "fresh")
    assert bm.match_prefix(fresh) == (fresh.num_tokens - 1) // BS * BS
    assert fresh.block_table == s.block_table[: len(fresh.block_table)]
