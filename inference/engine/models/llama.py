"""Compact Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) that reads and writes a paged KV cache.

All tokens of a step are flattened into one [T, hidden] tensor, so every projection is one matmul per layer for the
whole batch. Only attention looks at sequences separately: decode rows are batched into one padded SDPA call
(masked), prefill chunks get one SDPA call each. q/k/v and gate/up are fused into single matmuls at load time.
The arithmetic follows transformers' reference classes step by step (norms in fp32, rotary in the model dtype), so
logits match them to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from inference.engine.loader import ModelSpec


def _param(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x W^T + b. A single row on CPU (batch-1 decode) goes through torch.mv: measured here in bf16, it reads the
    weights about 20% faster than F.linear. (W @ x^T was faster still for a few rows, but its transposed output
    made the rest of the layer slower than the matmul saved.)"""
    if x.device.type == "cpu" and x.dim() == 2 and x.shape[0] == 1:
        y = torch.mv(weight, x[0]).unsqueeze(0)
        return y if bias is None else y + bias
    return F.linear(x, weight, bias)


class Linear(nn.Module):
    def __init__(self, n_in: int, n_out: int, bias: bool, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = _param((n_out, n_in), dtype, device)
        self.bias = _param((n_out,), dtype, device) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = _param((dim,), dtype, device)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_inv_freq(spec: ModelSpec) -> torch.Tensor:
    """Rotary frequencies, with 'linear' (positions stretched) or 'llama3' (long wavelengths stretched) scaling."""
    dim = spec.head_dim
    inv = 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    sc = spec.rope_scaling
    if sc is None:
        return inv
    if sc["rope_type"] == "linear":
        return inv / sc["factor"]
    # llama3: wavelengths longer than original_len/low_freq_factor are divided by factor, shorter than
    # original_len/high_freq_factor are kept, and those in between are blended linearly in 1/wavelength.
    factor, low, high, orig = (
        sc["factor"],
        sc["low_freq_factor"],
        sc["high_freq_factor"],
        sc["original_max_position_embeddings"],
    )
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > orig / low, inv / factor, inv)
    blend = (orig / wavelen - low) / (high - low)
    blended = (1 - blend) * scaled / factor + blend * scaled
    between = (wavelen >= orig / high) & (wavelen <= orig / low)
    return torch.where(between, blended, scaled)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class PrefillChunk:
    """Rows [start, end) of the step are one sequence's chunk; kv_slots None means it has no cached context."""

    start: int
    end: int
    kv_slots: torch.Tensor | None  # [L] cache slots of positions 0..L-1
    mask: torch.Tensor | None  # [end-start, L] bool, True where a query may attend


@dataclass
class StepMetadata:
    """Index tensors for one forward pass, built once and shared by every layer."""

    positions: torch.Tensor  # [T]
    slots: torch.Tensor  # [T] cache slot of each new token
    cos: torch.Tensor  # [T, 1, head_dim]
    sin: torch.Tensor
    decode_rows: torch.Tensor | None  # [B] rows that are single-token steps
    decode_kv_slots: torch.Tensor | None  # [B, Lmax] cache slots (padded)
    decode_mask: torch.Tensor | None  # [B, 1, 1, Lmax] bool
    prefills: list[PrefillChunk]
    logit_rows: torch.Tensor  # rows whose next-token logits are wanted


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.nq, self.nkv, self.hd = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.group = self.nq // self.nkv
        self.qkv_proj = Linear(
            spec.hidden_size, (self.nq + 2 * self.nkv) * self.hd, spec.qkv_bias, dtype, device
        )
        self.o_proj = Linear(self.nq * self.hd, spec.hidden_size, spec.o_bias, dtype, device)
        if spec.qk_norm:
            self.q_norm = RMSNorm(self.hd, spec.rms_norm_eps, dtype, device)
            self.k_norm = RMSNorm(self.hd, spec.rms_norm_eps, dtype, device)
        else:
            self.q_norm = self.k_norm = None
        self.scale = self.hd**-0.5

    def forward(
        self, x: torch.Tensor, meta: StepMetadata, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.nq * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q, k, v = (
            q.unflatten(-1, (self.nq, self.hd)),
            k.unflatten(-1, (self.nkv, self.hd)),
            v.unflatten(-1, (self.nkv, self.hd)),
        )
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotate(q, meta.cos, meta.sin), rotate(k, meta.cos, meta.sin)
        k_cache.index_copy_(0, meta.slots, k)
        v_cache.index_copy_(0, meta.slots, v)
        if meta.decode_rows is not None and not meta.prefills and meta.decode_rows.shape[0] == t:
            out = self._decode(q, meta, k_cache, v_cache)  # the common case: a pure decode step
        else:
            out = torch.empty_like(q)
            if meta.decode_rows is not None:
                out[meta.decode_rows] = self._decode(q[meta.decode_rows], meta, k_cache, v_cache)
            for chunk in meta.prefills:
                out[chunk.start : chunk.end] = self._prefill(q, k, v, chunk, k_cache, v_cache)
        return self.o_proj(out.flatten(1))

    def _decode(
        self, q: torch.Tensor, meta: StepMetadata, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        # One query per sequence: the query heads sharing a KV head become that head's "query rows", so GQA
        # needs no copy of K/V, and a padding mask is all the masking there is.
        b = q.shape[0]
        qg = q.reshape(b, self.nkv, self.group, self.hd)
        slots = (
            meta.decode_kv_slots
        )  # [B, L]; index_select on the flat slots is far faster than k_cache[slots]
        kg = (
            k_cache.index_select(0, slots.flatten())
            .view(b, slots.shape[1], self.nkv, self.hd)
            .transpose(1, 2)
        )
        vg = (
            v_cache.index_select(0, slots.flatten())
            .view(b, slots.shape[1], self.nkv, self.hd)
            .transpose(1, 2)
        )
        out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=meta.decode_mask, scale=self.scale)
        return out.reshape(b, self.nq, self.hd)

    def _prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        chunk: PrefillChunk,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        qc = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, nq, c, hd]
        if chunk.kv_slots is None:
            kc, vc = k[chunk.start : chunk.end], v[chunk.start : chunk.end]
        else:
            kc, vc = k_cache.index_select(0, chunk.kv_slots), v_cache.index_select(0, chunk.kv_slots)
        kc, vc = kc.transpose(0, 1).unsqueeze(0), vc.transpose(0, 1).unsqueeze(0)  # [1, nkv, L, hd]
        if self.group > 1:
            kc, vc = kc.repeat_interleave(self.group, dim=1), vc.repeat_interleave(self.group, dim=1)
        if chunk.mask is None:
            out = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True, scale=self.scale)
        else:
            out = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=chunk.mask, scale=self.scale)
        return out[0].transpose(0, 1)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.gate_up_proj = Linear(spec.hidden_size, 2 * spec.intermediate_size, spec.mlp_bias, dtype, device)
        self.down_proj = Linear(spec.intermediate_size, spec.hidden_size, spec.mlp_bias, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype, device)
        self.self_attn = Attention(spec, dtype, device)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype, device)
        self.mlp = MLP(spec, dtype, device)

    def forward(
        self, x: torch.Tensor, meta: StepMetadata, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), meta, k_cache, v_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """Parameter names follow the checkpoint's except the fused qkv_proj and gate_up_proj (see load_weight)."""

    def __init__(self, spec: ModelSpec, max_model_len: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.spec, self.dtype, self.device = spec, dtype, device
        self.embed_tokens = _param((spec.vocab_size, spec.hidden_size), dtype, device)
        self.layers = nn.ModuleList(DecoderLayer(spec, dtype, device) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype, device)
        if spec.tie_word_embeddings:
            self.lm_head = self.embed_tokens
        else:
            self.lm_head = _param((spec.vocab_size, spec.hidden_size), dtype, device)
        freqs = torch.outer(torch.arange(max_model_len, dtype=torch.float32), rope_inv_freq(spec))
        angles = torch.cat((freqs, freqs), dim=-1)
        # cos/sin are computed in fp32 and used in the model dtype, as transformers does
        self.register_buffer("rope_cos", angles.cos().to(dtype=dtype, device=device), persistent=False)
        self.register_buffer("rope_sin", angles.sin().to(dtype=dtype, device=device), persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        meta: StepMetadata,
        k_caches: list[torch.Tensor],
        v_caches: list[torch.Tensor],
    ) -> torch.Tensor:
        """Float32 logits [len(meta.logit_rows), vocab]."""
        x = F.embedding(input_ids, self.embed_tokens)
        for layer, kc, vc in zip(self.layers, k_caches, v_caches, strict=True):
            x = layer(x, meta, kc, vc)
        x = self.norm(x[meta.logit_rows])
        return linear(x, self.lm_head).float()

    # -- weights -------------------------------------------------------------------------------------------
    # our fused parameter -> the checkpoint's parts, stacked in this order along the output rows
    _FUSED = {
        "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    }

    def _fused_sizes(self, fused: str) -> list[int]:
        s = self.spec
        if fused == "self_attn.qkv_proj":
            return [s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim, s.num_kv_heads * s.head_dim]
        return [s.intermediate_size, s.intermediate_size]

    def weight_targets(self) -> dict[str, tuple[nn.Parameter, int, int]]:
        """Checkpoint tensor name -> (our parameter, first row, number of rows) for every tensor we need."""
        out: dict[str, tuple[nn.Parameter, int, int]] = {}
        for name, p in self.named_parameters(remove_duplicate=False):
            if name == "lm_head":
                if not self.spec.tie_word_embeddings:
                    out["lm_head.weight"] = (p, 0, p.shape[0])
                continue
            if name == "embed_tokens":
                out["model.embed_tokens.weight"] = (p, 0, p.shape[0])
                continue
            fused = next((f for f in self._FUSED if f".{f}." in name), None)
            if fused is None:
                out[f"model.{name}"] = (p, 0, p.shape[0])
                continue
            row = 0
            for part, rows in zip(self._FUSED[fused], self._fused_sizes(fused), strict=True):
                out[f"model.{name.replace(fused, part)}"] = (p, row, rows)
                row += rows
        return out
