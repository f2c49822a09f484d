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


def _filter(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Mask (to -inf) what top-k, top-p and min-p exclude, batched over rows that may all differ."""
    device, vocab = logits.device, logits.shape[-1]
    neg_inf = torch.tensor(float("-inf"), device=device, dtype=logits.dtype)
    top_ps = [p.top_p for p in params]
    top_ks = [vocab if p.top_k == -1 else min(p.top_k, vocab) for p in params]
    if any(tp < 1.0 for tp in top_ps):
        vals, idx = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab, device=device)
        keep = ranks[None, :] < torch.tensor(top_ks, device=device)[:, None]
        vals = torch.where(keep, vals, neg_inf)
        probs = vals.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        keep = before < torch.tensor(top_ps, device=device, dtype=probs.dtype)[:, None]
        vals = torch.where(keep, vals, neg_inf)
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, idx, vals)
    elif any(k < vocab for k in top_ks):
        top = logits.topk(max(top_ks), dim=-1).values
        kth = top.gather(-1, torch.tensor(top_ks, device=device)[:, None] - 1)
        logits = torch.where(logits < kth, neg_inf, logits)
    min_ps = [p.min_p for p in params]
    if any(mp > 0.0 for mp in min_ps):
        probs = logits.softmax(dim=-1)
        floor = probs.max(dim=-1, keepdim=True).values * torch.tensor(min_ps, device=device)[:, None]
        logits = torch.where(probs < floor, neg_inf, logits)
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
