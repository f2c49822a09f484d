"""The sampler on hand-made logits: greedy, filters, penalties, and seeds independent of the batch."""

import torch

from inference.engine.sampler import Sampler, SamplingRow
from inference.engine.sampling_params import SamplingParams

V = 50


def row(params, prompt=(), output=(), seed=None):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return SamplingRow(params, gen, list(prompt), list(output))


def logits_for(*peaks):
    x = torch.zeros(len(peaks), V)
    for i, p in enumerate(peaks):
        x[i, p] = 5.0
        x[i, (p + 1) % V] = 4.0
    return x


def test_all_greedy_is_argmax_per_row():
    s = Sampler()
    out = s(logits_for(3, 7, 11), [row(SamplingParams(temperature=0))] * 3)
    assert out == [3, 7, 11]


def test_top_k_one_and_tiny_top_p_are_greedy_even_when_sampling():
    s = Sampler()
    rows = [row(SamplingParams(temperature=1.5, top_k=1)), row(SamplingParams(temperature=1.5, top_p=1e-6))]
    for _ in range(20):
        assert s(logits_for(9, 21), rows) == [9, 21]


def test_min_p_keeps_only_tokens_near_the_best():
    s = Sampler()
    logits = torch.full((1, V), -10.0)
    logits[0, 4], logits[0, 5] = 3.0, 2.9
    picks = {s(logits, [row(SamplingParams(temperature=1.0, min_p=0.5))])[0] for _ in range(60)}
    assert picks == {4, 5}


def test_top_k_limits_the_candidates():
    s = Sampler()
    logits = torch.arange(V, dtype=torch.float32)[None, :] / 10
    picks = {s(logits, [row(SamplingParams(temperature=5.0, top_k=3))])[0] for _ in range(200)}
    assert picks <= {V - 1, V - 2, V - 3} and len(picks) > 1


def test_penalties_steer_greedy_away_from_repeats():
    s = Sampler()
    logits = logits_for(3)
    assert s(logits, [row(SamplingParams(temperature=0, repetition_penalty=2.0), prompt=[3])]) == [4]
    assert s(logits, [row(SamplingParams(temperature=0, frequency_penalty=0.6), output=[3, 3])]) == [4]
    assert s(logits, [row(SamplingParams(temperature=0, presence_penalty=1.5), output=[3])]) == [4]
    assert s(logits, [row(SamplingParams(temperature=0, presence_penalty=0.5), output=[3])]) == [3]
    assert torch.equal(logits, logits_for(3))  # the caller's logits are untouched


def test_a_seeded_row_draws_the_same_whatever_else_is_in_the_batch():
    s = Sampler()
    torch.manual_seed(0)
    base = torch.randn(1, V)
    p = SamplingParams(temperature=1.0, top_p=0.95, seed=7)
    alone = [s(base, [row(p, seed=7)])[0] for _ in range(1)]
    gen = torch.Generator().manual_seed(7)
    seeded_alone = [s(base, [SamplingRow(p, gen, [], [])])[0] for _ in range(30)]
    gen = torch.Generator().manual_seed(7)
    mixed = []
    for i in range(30):
        others = torch.randn(3, V)
        batch = torch.cat([others[:1], base, others[1:]])
        rows = [
            row(SamplingParams(temperature=0)),
            SamplingRow(p, gen, [], []),
            row(SamplingParams(temperature=0.7, top_k=5)),
            row(SamplingParams(temperature=1.2, min_p=0.1), seed=i),
        ]
        mixed.append(s(batch, rows)[1])
    assert seeded_alone == mixed and alone[0] == seeded_alone[0]
    assert len(set(seeded_alone)) > 1  # it really samples


def _reference_keep(row: torch.Tensor, k: int, p: float) -> set[int]:
    """Top-k, then top-p renormalised within top-k, by the textbook full sort, one row at a time."""
    vals, idx = row.sort(descending=True)
    vals = vals[:k]
    probs = (vals - vals.logsumexp(dim=-1)).exp()
    before = probs.cumsum(dim=-1) - probs
    return set(idx[:k][before < p].tolist())


def test_top_k_top_p_filter_is_exact_on_peaked_and_flat_rows():
    from inference.engine.sampler import _filter

    gen = torch.Generator().manual_seed(5)
    vocab = 3000
    peaked = torch.randn(6, vocab, generator=gen) * 4  # the nucleus sits in the top candidates
    flat = torch.randn(6, vocab, generator=gen) * 0.1  # it does not: the full sort must take over
    settings = [(-1, 0.9), (20, 0.5), (-1, 0.3), (1000, 0.95), (5, 1.0), (-1, 0.99)]
    for logits in (peaked, flat):
        params = [SamplingParams(top_k=k, top_p=p) for k, p in settings]
        out = _filter(logits.clone(), params)
        for i, (k, p) in enumerate(settings):
            kept = set(torch.nonzero(out[i] > float("-inf")).flatten().tolist())
            assert kept == _reference_keep(logits[i], vocab if k == -1 else k, p), (i, k, p)
            assert torch.equal(out[i][list(kept)], logits[i][list(kept)])  # kept logits unchanged


def test_rows_without_filters_are_left_alone_next_to_filtered_ones():
    from inference.engine.sampler import _filter

    logits = torch.randn(2, 100)
    out = _filter(logits.clone(), [SamplingParams(), SamplingParams(top_p=0.5)])
    assert torch.equal(out[0], logits[0]) and (out[1] == float("-inf")).any()
