"""The inference engine: continuous batching over a paged KV cache, streaming each request's text.

`from inference.engine import LLM, LLMEngine, SamplingParams`. Names are loaded on first use, so importing a
torch-free module of this package (say `inference.engine.sampling_params`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "LLM": ".llm",
    "LLMEngine": ".engine",
    "SamplingParams": ".sampling_params",
    "EngineConfig": ".config",
    "RequestOutput": ".outputs",
    "CompletionOutput": ".outputs",
}

__all__ = ["LLM", "LLMEngine", "SamplingParams", "EngineConfig", "RequestOutput", "CompletionOutput"]

if TYPE_CHECKING:
    from .config import EngineConfig
    from .engine import LLMEngine
    from .llm import LLM
    from .outputs import CompletionOutput, RequestOutput
    from .sampling_params import SamplingParams


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
