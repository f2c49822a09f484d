"""Engine configuration: every knob in one validated object, so a bad option fails at start, not mid-run."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

DTYPES = ("auto", "bfloat16", "float16", "float32")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
DEFAULT_CPU_KV_CACHE_MEMORY = 512 * 1024 * 1024


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass
class EngineConfig:
    """Options of one engine. `kv_cache_memory` None means the runner's default budget (512 MiB on CPU)."""

    model: str | Path
    dtype: str = "auto"
    device: str = "auto"
    block_size: int = 16
    kv_cache_memory: int | None = None
    num_kv_blocks: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    max_model_len: int | None = None
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.model, str | Path) or not str(self.model).strip():
            raise ValueError(f"model must be a non-empty path or hub id, got {self.model!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}")
        if not isinstance(self.device, str) or not _DEVICE_RE.match(self.device):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got {self.device!r}")
        _positive_int("block_size", self.block_size)
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({self.max_num_seqs}), or some running sequences could never get their decode step"
            )
        for name in ("kv_cache_memory", "num_kv_blocks", "max_model_len"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(name, value)
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be a bool, got {self.enable_prefix_caching!r}")

    @classmethod
    def from_options(cls, model: str | Path, **options: object) -> EngineConfig:
        """Build from keyword options, naming any unknown one (a typo must not be silently ignored)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"unknown engine option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(model=model, **options)  # type: ignore[arg-type]
