"""Our Llama-family model code against transformers' own classes: same logits, prefilled in chunks or decoded
through the paged cache, alone or batched with other sequences."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from inference.engine.model_runner import ForwardItem, ModelRunner
from tests.fixtures.models import TINY_VARIANTS, build_tiny_checkpoint

BLOCK = 4
TOL = {"atol": 2e-5, "rtol": 1e-4}


@pytest.fixture(scope="module", params=sorted(TINY_VARIANTS))
def tiny(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf = build_tiny_checkpoint(path, request.param)
    runner = ModelRunner(path, dtype=torch.float32, device="cpu", block_size=BLOCK, num_kv_blocks=64)
    return hf, runner


def _reference(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def _prompt(seed: int, n: int, vocab: int = 96) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def _blocks(first: int, n: int) -> list[int]:
    """A deliberately scattered, descending block table."""
    return [first + 2 * (n - i) for i in range(n)]


def test_chunked_prefill_then_paged_decode(tiny) -> None:
    hf, runner = tiny
    ids = _prompt(1, 24)
    ref = _reference(hf, ids)
    table = _blocks(3, 6)
    got = [runner.execute([ForwardItem(ids[:7], 0, table, True)])[0]]
    got.append(runner.execute([ForwardItem(ids[7:13], 7, table, True)])[0])
    got.append(runner.execute([ForwardItem(ids[13:14], 13, table, True)])[0])  # a 1-token prefill chunk
    for p in range(14, 24):
        got.append(runner.execute([ForwardItem([ids[p]], p, table, True)])[0])
    want = torch.stack([ref[6], ref[12], *ref[13:24]])
    torch.testing.assert_close(torch.stack(got), want, **TOL)


def test_mixed_batch_matches_each_sequence_alone(tiny) -> None:
    """Two decodes of different lengths, a fresh prefill and a continued prefill chunk, all in one step."""
    hf, runner = tiny
    a, b, c, d = _prompt(2, 9), _prompt(3, 17), _prompt(4, 11), _prompt(5, 15)
    ta, tb, tc, td = _blocks(1, 3), _blocks(20, 5), _blocks(40, 3), _blocks(48, 4)
    # warm the caches of a, b and d's first part
    runner.execute(
        [
            ForwardItem(a[:8], 0, ta, False),
            ForwardItem(b[:16], 0, tb, False),
            ForwardItem(d[:6], 0, td, False),
        ]
    )
    logits = runner.execute(
        [
            ForwardItem(a[8:9], 8, ta, True),
            ForwardItem(c, 0, tc, True),
            ForwardItem(d[6:15], 6, td, True),
            ForwardItem(b[16:17], 16, tb, True),
        ]
    )
    want = torch.stack(
        [_reference(hf, a)[-1], _reference(hf, c)[-1], _reference(hf, d)[-1], _reference(hf, b)[-1]]
    )
    torch.testing.assert_close(logits, want, **TOL)


def test_only_requested_rows_get_logits(tiny) -> None:
    _hf, runner = tiny
    out = runner.execute([ForwardItem([1, 2, 3], 0, [0], False), ForwardItem([4, 5], 0, [1], True)])
    assert out.shape == (1, runner.spec.vocab_size) and out.dtype == torch.float32
    none = runner.execute([ForwardItem([1, 2, 3], 0, [0], False)])
    assert none.shape == (0, runner.spec.vocab_size)


def test_bf16_runs_close_to_fp32(tmp_path: Path) -> None:
    hf = build_tiny_checkpoint(tmp_path, "qwen3")
    ids = _prompt(7, 20)
    runner = ModelRunner(tmp_path, dtype=torch.bfloat16, device="cpu", block_size=BLOCK, num_kv_blocks=16)
    runner.execute([ForwardItem(ids[:19], 0, list(range(5)), False)])
    got = runner.execute([ForwardItem(ids[19:], 19, list(range(5)), True)])[0]
    ref = _reference(hf, ids)[-1]
    assert torch.nn.functional.cosine_similarity(got, ref, dim=0) > 0.99


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_transformers(tmp_path: Path) -> None:
    hf = build_tiny_checkpoint(tmp_path, "llama-bias-tied-llama3")
    runner = ModelRunner(tmp_path, dtype=torch.float32, device="cuda", block_size=BLOCK, num_kv_blocks=32)
    assert runner.k_cache[0].device.type == "cuda"
    ids = _prompt(8, 21)
    table = _blocks(2, 6)
    got = [runner.execute([ForwardItem(ids[:13], 0, table, True)])[0]]
    got.append(runner.execute([ForwardItem(ids[13:17], 13, table, True)])[0])
    for p in range(17, 21):
        got.append(runner.execute([ForwardItem([ids[p]], p, table, True)])[0])
    ref = _reference(hf, ids)
    want = torch.stack([ref[12], ref[16], *ref[17:21]])
    torch.testing.assert_close(torch.stack(got).cpu(), want, atol=1e-4, rtol=1e-3)
