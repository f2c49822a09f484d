"""ModelRunner: owns the model and the paged KV pool, and runs one forward pass for a step's ForwardItems.

The pool is preallocated once: per layer one K and one V tensor of num_blocks * block_size slots. A sequence's
position p lives in slot block_table[p // block_size] * block_size + p % block_size, so the block manager decides
where everything goes and the runner only turns block tables into index tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inference.engine.loader import load_hf_config, load_model, model_spec, resolve_model_dir
from inference.engine.models.llama import PrefillChunk, StepMetadata

DEFAULT_CPU_KV_CACHE_MEMORY = 512 * 1024 * 1024
CUDA_KV_FRACTION_OF_FREE = 0.8  # of the memory free after the weights are loaded; the rest is for activations


@dataclass
class ForwardItem:
    """One sequence's work in this step (see docs/engine-internals.md)."""

    token_ids: list[int]
    start_pos: int
    block_table: list[int]
    need_logits: bool


class ModelRunner:
    def __init__(
        self,
        model_dir: str | Path,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
        block_size: int,
        kv_cache_memory: int | None = None,
        num_kv_blocks: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.model_dir = resolve_model_dir(model_dir)
        self.hf_config = load_hf_config(self.model_dir)
        self.spec = model_spec(self.hf_config)
        if max_model_len is not None and max_model_len > self.spec.max_model_len:
            raise ValueError(
                f"max_model_len {max_model_len} is more than this model supports ({self.spec.max_model_len})"
            )
        self.max_model_len: int = max_model_len or self.spec.max_model_len
        self.device = torch.device(device)
        self.dtype = dtype
        self.block_size = block_size
        self.model = load_model(
            self.model_dir, self.spec, dtype=dtype, device=self.device, max_model_len=self.max_model_len
        )
        self.num_blocks: int = self._pool_blocks(kv_cache_memory, num_kv_blocks)
        slots = self.num_blocks * block_size
        shape = (slots, self.spec.num_kv_heads, self.spec.head_dim)
        # zeros, not empty: padded gathers read unwritten slots, and garbage there could be NaN (NaN * 0 = NaN)
        self.k_cache = [
            torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.spec.num_layers)
        ]
        self.v_cache = [
            torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.spec.num_layers)
        ]

    @property
    def bytes_per_block(self) -> int:
        s = self.spec
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * s.num_layers * self.block_size * s.num_kv_heads * s.head_dim * elem

    def _pool_blocks(self, kv_cache_memory: int | None, num_kv_blocks: int | None) -> int:
        if num_kv_blocks is not None:
            if num_kv_blocks < 1:
                raise ValueError(f"num_kv_blocks must be positive, got {num_kv_blocks}")
            return num_kv_blocks
        if kv_cache_memory is None:
            if self.device.type == "cuda":
                free, _total = torch.cuda.mem_get_info(self.device)
                kv_cache_memory = int(free * CUDA_KV_FRACTION_OF_FREE)
            else:
                kv_cache_memory = DEFAULT_CPU_KV_CACHE_MEMORY
        blocks = kv_cache_memory // self.bytes_per_block
        if blocks < 1:
            raise ValueError(
                f"kv_cache_memory {kv_cache_memory} bytes holds no KV block (one block takes {self.bytes_per_block} bytes)"
            )
        return blocks

    # -- one step ------------------------------------------------------------------------------------------
    def _check(self, item: ForwardItem) -> int:
        n = len(item.token_ids)
        end = item.start_pos + n
        if n == 0 or item.start_pos < 0:
            raise ValueError(
                f"a forward item needs tokens and a non-negative start_pos, got {n} at {item.start_pos}"
            )
        if end > self.max_model_len:
            raise ValueError(f"positions up to {end} exceed max_model_len {self.max_model_len}")
        need = -(-end // self.block_size)
        if len(item.block_table) < need:
            raise ValueError(
                f"block table has {len(item.block_table)} blocks, positions up to {end} need {need}"
            )
        return end

    def _slots(self, table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return table[..., positions // self.block_size] * self.block_size + positions % self.block_size

    def _metadata(self, items: list[ForwardItem]) -> tuple[torch.Tensor, StepMetadata]:
        """Build every index tensor on the CPU with a few vectorised ops, then move them once."""
        token_ids: list[int] = []
        positions: list[torch.Tensor] = []
        slots: list[torch.Tensor] = []
        decode_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[tuple[int, int, torch.Tensor | None, torch.Tensor | None]] = []
        logit_rows: list[int] = []
        row = 0
        for item in items:
            end = self._check(item)
            n = len(item.token_ids)
            table = torch.tensor(item.block_table[: -(-end // self.block_size)], dtype=torch.long)
            pos = torch.arange(item.start_pos, end)
            token_ids.extend(item.token_ids)
            positions.append(pos)
            slots.append(self._slots(table, pos))
            if n == 1:
                decode_rows.append(row)
                decode_tables.append(table.tolist())
                decode_lens.append(end)
            elif item.start_pos == 0:
                prefills.append((row, row + n, None, None))
            else:
                ctx = torch.arange(end)
                mask = ctx[None, :] <= pos[:, None]
                prefills.append((row, row + n, self._slots(table, ctx), mask))
            row += n
            if item.need_logits:
                logit_rows.append(row - 1)
        dev = self.device
        pos_all = torch.cat(positions).to(dev)
        meta = StepMetadata(
            positions=pos_all,
            slots=torch.cat(slots).to(dev),
            cos=self.model.rope_cos[pos_all].unsqueeze(1),
            sin=self.model.rope_sin[pos_all].unsqueeze(1),
            decode_rows=None,
            decode_kv_slots=None,
            decode_mask=None,
            prefills=[
                PrefillChunk(a, b, None if s is None else s.to(dev), None if m is None else m.to(dev))
                for a, b, s, m in prefills
            ],
            logit_rows=torch.tensor(logit_rows, dtype=torch.long).to(dev),
        )
        if decode_rows:
            width = max(len(t) for t in decode_tables)
            tables = torch.tensor([t + [0] * (width - len(t)) for t in decode_tables], dtype=torch.long)
            ctx = torch.arange(max(decode_lens))
            lens = torch.tensor(decode_lens)
            meta.decode_rows = torch.tensor(decode_rows, dtype=torch.long).to(dev)
            meta.decode_kv_slots = self._slots(tables, ctx).to(dev)
            meta.decode_mask = (ctx[None, :] < lens[:, None])[:, None, None, :].to(dev)
        ids = torch.tensor(token_ids, dtype=torch.long)
        if int(ids.min()) < 0 or int(ids.max()) >= self.spec.vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {self.spec.vocab_size}); got {int(ids.min())}..{int(ids.max())}"
            )
        return ids.to(dev), meta

    @torch.inference_mode()
    def execute(self, items: list[ForwardItem]) -> torch.Tensor:
        """One forward pass; float32 logits [number of items with need_logits, vocab], in item order."""
        if not items:
            raise ValueError("execute needs at least one forward item")
        input_ids, meta = self._metadata(items)
        return self.model(input_ids, meta, self.k_cache, self.v_cache)
