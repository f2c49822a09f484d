"""The runner's own duties: KV slots written where the block table says, shared prefix blocks reused, step input
checked, and the demo model running in bf16."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inference.engine.model_runner import ForwardItem, ModelRunner
from tests.fixtures.models import build_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("runner")
    hf = build_tiny_checkpoint(path, "qwen3")
    return hf, ModelRunner(
        path, dtype=torch.float32, device="cpu", block_size=4, num_kv_blocks=16, max_model_len=64
    )


def test_kv_goes_exactly_to_the_block_table_slots(tiny) -> None:
    _hf, runner = tiny
    for cache in runner.k_cache + runner.v_cache:
        cache.zero_()
    runner.execute([ForwardItem([5, 6, 7, 8, 9], 0, [3, 1], False)])
    written = {int(i) for i in (runner.k_cache[0].abs().sum(dim=(1, 2)) != 0).nonzero()}
    assert written == {12, 13, 14, 15, 4}
    for cache in runner.k_cache + runner.v_cache:
        assert {int(i) for i in (cache.abs().sum(dim=(1, 2)) != 0).nonzero()} == written


def test_shared_prefix_blocks_are_reused(tiny) -> None:
    """A second sequence whose first two blocks are another's cached blocks computes only its own tokens."""
    hf, runner = tiny
    shared = [11, 12, 13, 14, 15, 16, 17, 18]
    a, b = shared + [40, 41, 42], shared + [50, 51, 52, 53, 54]
    runner.execute([ForwardItem(a, 0, [7, 2, 9], False)])
    got = runner.execute([ForwardItem(b[8:], 8, [7, 2, 10, 11], True)])[0]
    with torch.no_grad():
        want = hf(torch.tensor([b])).logits[0, -1]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("items", "match"),
    [
        ([], "at least one"),
        ([ForwardItem([], 0, [0], True)], "needs tokens"),
        ([ForwardItem([1], -1, [0], True)], "non-negative"),
        ([ForwardItem([1, 2, 3, 4, 5], 0, [0], True)], "block table has 1 blocks"),
        ([ForwardItem([1], 64, list(range(16)), True)], "exceed max_model_len 64"),
        ([ForwardItem([1, 96], 0, [0], True)], r"token ids must lie in \[0, 96\)"),
        ([ForwardItem([-3], 0, [0], True)], "token ids must lie"),
    ],
)
def test_bad_items_are_refused(tiny, items, match: str) -> None:
    _hf, runner = tiny
    with pytest.raises(ValueError, match=match):
        runner.execute(items)


def test_demo_model_runs_in_bf16(demo_model_dir: Path) -> None:
    runner = ModelRunner(demo_model_dir, dtype=torch.bfloat16, device="cpu", block_size=16, num_kv_blocks=8)
    assert runner.hf_config.llmchat_demo is True
    logits = runner.execute(
        [ForwardItem([10, 20, 30], 0, [0], True), ForwardItem([40] * 20, 0, [1, 2], True)]
    )
    assert logits.shape == (2, runner.spec.vocab_size) and torch.isfinite(logits).all()
    decode = runner.execute([ForwardItem([7], 3, [0], True), ForwardItem([8], 20, [1, 2], True)])
    assert decode.shape == (2, runner.spec.vocab_size) and torch.isfinite(decode).all()
