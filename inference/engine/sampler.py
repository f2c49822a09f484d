"""Pick one token per row of logits, each row with its own request's sampling parameters.

All-greedy batches take one argmax. Otherwise penalties are applied only to the rows that ask for them,
the filters (top-k, top-p, min-p) run batched over the sampled rows, and the draw uses the exponential
trick (argmax of p / E, E ~ Exp(1)) so a seeded row draws its noise from its own generator alone: the same
seed gives the same tokens whatever else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling_params import SamplingParams


@dataclass
class SamplingRow:
    params: SamplingParams
    generator: torch.Generator | None  # seeded per request when params.seed is set
    prompt_token_ids: list[int]
    output_token_ids: list[int]


def _apply_penalties(row: torch.Tensor, spec: SamplingRow) -> None:
    """vLLM/OpenAI semantics: repetition over prompt and output; presence and frequency over the output."""
    p = spec.params
    device, vocab = row.device, row.shape[-1]
    if p.repetition_penalty != 1.0:
        seen = torch.zeros(vocab, dtype=torch.bool, device=device)
        ids = spec.prompt_token_ids + spec.output_token_ids
        seen[torch.tensor(ids, dtype=torch.long, device=device)] = True
        penalised = torch.where(row > 0, row / p.repetition_penalty, row * p.repetition_penalty)
        row.copy_(torch.where(seen, penalised, row))
    if spec.output_token_ids and (p.presence_penalty != 0.0 or p.frequency_penalty != 0.0):
        out = torch.tensor(spec.output_token_ids, dtype=torch.long, device=device)
        counts = torch.bincount(out, minlength=vocab)[:vocab].to(row.dtype)
        row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(row.dtype)


_CANDIDATES = 256  # top-p looks here first: a full-vocabulary sort costs far more than this top-k


def _nucleus(
    vals: torch.Tensor, norm: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor
) -> torch.Tensor:
    """Keep-mask over descending `vals`: rank below top_k, and the mass ranked above below top_p."""
    ranks = torch.arange(vals.shape[-1], device=vals.device)
    in_k = ranks[None, :] < top_ks[:, None]
    probs = torch.where(in_k, (vals - norm[:, None]).exp(), 0.0)
    before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
    return in_k & (before < top_ps[:, None])


def _top_k_top_p(logits: torch.Tensor, top_ks: list[int], top_ps: list[float]) -> torch.Tensor:
    """Mask to -inf what top-k and then top-p (renormalised within top-k) exclude; exact.

    The nucleus is searched among the top candidates when they provably hold it (the row's top-k fits in
    them, or it has no top-k and their mass reaches top_p); otherwise the whole vocabulary is sorted.
    """
    device, vocab = logits.device, logits.shape[-1]
    ks = torch.tensor(top_ks, device=device)
    ps = torch.tensor(top_ps, device=device, dtype=logits.dtype)
    if all(tp >= 1.0 for tp in top_ps):
        kth = logits.topk(max(top_ks), dim=-1).values.gather(-1, ks[:, None] - 1)
        return logits.masked_fill(logits < kth, float("-inf"))
    width = min(vocab, _CANDIDATES)
    vals, idx = logits.topk(width, dim=-1)
    full_norm = logits.logsumexp(dim=-1)
    k_norm = vals.masked_fill(torch.arange(width, device=device)[None, :] >= ks[:, None], float("-inf"))
    norm = torch.where(ks < vocab, k_norm.logsumexp(dim=-1), full_norm)
    mass = (vals - full_norm[:, None]).exp().sum(dim=-1)
    if not bool(((ks <= width) | ((ks == vocab) & (mass >= ps))).all()):
        vals, idx = logits.sort(dim=-1, descending=True)
        norm = vals.masked_fill(torch.arange(vocab, device=device)[None, :] >= ks[:, None], float("-inf"))
        norm = norm.logsumexp(dim=-1)
    keep = _nucleus(vals, norm, ks, ps)
    kept = vals.masked_fill(~keep, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter_(-1, idx, kept)


def _filter(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Apply top-k, top-p and min-p, each only to the rows that ask for it (rows may all differ)."""
    vocab = logits.shape[-1]
    rows = [i for i, p in enumerate(params) if p.top_p < 1.0 or p.top_k != -1]
    if rows:
        top_ks = [vocab if params[i].top_k == -1 else min(params[i].top_k, vocab) for i in rows]
        top_ps = [params[i].top_p for i in rows]
        logits[rows] = _top_k_top_p(logits[rows], top_ks, top_ps)
    min_ps = [p.min_p for p in params]
    if any(mp > 0.0 for mp in min_ps):
        probs = logits.softmax(dim=-1)
        floor = probs.max(dim=-1, keepdim=True).values * torch.tensor(min_ps, device=logits.device)[:, None]
        logits = logits.masked_fill(probs < floor, float("-inf"))
    return logits


class Sampler:
    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> list[int]:
        """One token id per row of `logits` ([len(rows), vocab], float32)."""
        if logits.shape[0] != len(rows):
            raise ValueError(f"{logits.shape[0]} rows of logits for {len(rows)} sampling rows")
        if all(r.params.greedy and not r.params.has_penalties for r in rows):
            return logits.argmax(dim=-1).tolist()
        logits = logits.float().clone()
        for i, row in enumerate(rows):
            if row.params.has_penalties:
                _apply_penalties(logits[i], row)
        result = [0] * len(rows)
        greedy = [i for i, r in enumerate(rows) if r.params.greedy]
        if greedy:
            picks = logits[greedy].argmax(dim=-1).tolist()
            for i, t in zip(greedy, picks, strict=True):
                result[i] = t
        sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
        if sampled:
            params = [rows[i].params for i in sampled]
            temps = torch.tensor([p.temperature for p in params], device=logits.device)
            probs = _filter(logits[sampled] / temps[:, None], params).softmax(dim=-1)
            noise = torch.empty_like(probs).exponential_()
            for j, i in enumerate(sampled):
                gen = rows[i].generator
                if gen is not None:
                    noise[j].exponential_(generator=gen)
            noise.clamp_min_(torch.finfo(noise.dtype).tiny)  # a zero draw would turn p = 0 into NaN, and win
            picks = (probs / noise).argmax(dim=-1).tolist()
            for i, t in zip(sampled, picks, strict=True):
                result[i] = t
        return result
