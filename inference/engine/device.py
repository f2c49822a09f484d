"""Resolve "auto" device and dtype: CUDA when present, bf16 where the hardware runs it natively."""

from __future__ import annotations

from pathlib import Path

import torch

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(device: str) -> torch.device:
    """ "auto" -> cuda if available, else cpu; an explicit CUDA device must exist."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return resolved


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 math (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slow."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    for name in probes:
        probe = getattr(torch.cpu, name, None)
        if probe is not None and probe():
            return True
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        flags = cpuinfo.read_text(errors="replace")
        return "avx512_bf16" in flags or "amx_bf16" in flags
    return False


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """ "auto" -> bf16 on CUDA (fp16 on GPUs without bf16) and on bf16-capable CPUs, else fp32."""
    if dtype != "auto":
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be 'auto' or one of {', '.join(_DTYPES)}; got {dtype!r}")
        return _DTYPES[dtype]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if device.type == "cpu" and cpu_supports_bf16() else torch.float32
