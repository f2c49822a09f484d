"""Find a model (local folder or hub id), check that our model code supports it, and load its weights.

Everything a checkpoint may say that our compact Llama-family code does not implement is refused here, by name,
before any weight is read: silently ignoring an option would give a model that runs and answers wrongly.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer.model", "*.jinja", "*.txt"]


class UnsupportedModelError(ValueError):
    """The checkpoint uses an architecture or option that our model code does not implement."""


class ModelNotFoundError(FileNotFoundError):
    """Neither a local model folder nor a hub id that can be found (cached or downloaded)."""


def resolve_model_dir(model: str | Path) -> Path:
    """A local folder holding config.json, from a path or a hub id (the local HF cache first, then a download)."""
    text = str(model).strip()
    if not text:
        raise ModelNotFoundError(
            "model must be a folder path or a hub id like 'owner/name'; got an empty string"
        )
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model folder {path} has no config.json (is it a Hugging Face model folder?)"
            )
        return path
    looks_like_path = (
        path.is_absolute() or text.startswith((".", "~")) or path.exists() or text.count("/") > 1
    )
    if looks_like_path or not _HUB_ID_RE.match(text):
        raise ModelNotFoundError(
            f"model folder {text!r} does not exist (and it is not a hub id like 'owner/name')"
        )
    return _hub_snapshot(text)


def _hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError, or a partial snapshot): try the network
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ModelNotFoundError(
            f"model {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            f"download it on a machine with network access, or pass a local folder"
        )
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS))
    except Exception as exc:
        raise ModelNotFoundError(
            f"model {repo_id!r} is not a local folder, not in the local Hugging Face cache, and could not be "
            f"downloaded ({type(exc).__name__}: {exc}); pass a local folder or check the id and the network"
        ) from exc


@dataclass(frozen=True)
class ModelSpec:
    """What our model code needs to know about a checkpoint, normalised across the four families."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None  # None, or {"rope_type": "linear"|"llama3", ...}
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    tie_word_embeddings: bool
    max_position_embeddings: int
    max_model_len: int  # the longest context that gives correct results (a sliding window caps it)


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    return getattr(cfg, name, default) if not isinstance(cfg, dict) else cfg.get(name, default)


def _rope(cfg: Any) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from either transformers 5's `rope_parameters` or 4.x's `rope_theta` + `rope_scaling`."""
    params = dict(_get(cfg, "rope_parameters") or {})
    if not params:
        params = dict(_get(cfg, "rope_scaling") or {})
        params.setdefault("rope_theta", _get(cfg, "rope_theta", 10000.0))
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope scaling type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    theta = float(params.get("rope_theta", 10000.0))
    if rope_type == "default":
        return theta, None
    factor = params.get("factor")
    if not isinstance(factor, int | float) or not math.isfinite(factor) or factor <= 0:
        raise UnsupportedModelError(f"rope scaling {rope_type!r} needs a positive 'factor', got {factor!r}")
    scaling: dict[str, Any] = {"rope_type": rope_type, "factor": float(factor)}
    if rope_type == "llama3":
        for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            if not isinstance(params.get(key), int | float):
                raise UnsupportedModelError(f"rope scaling 'llama3' needs a number for {key!r}")
            scaling[key] = float(params[key])
    return theta, scaling


def model_spec(cfg: Any) -> ModelSpec:
    """Validate a transformers config (object or dict) and normalise it; UnsupportedModelError names the problem."""
    archs = _get(cfg, "architectures") or []
    if len(archs) != 1 or archs[0] not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(
            f"architecture {archs or 'unknown'} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    arch = archs[0]
    if _get(cfg, "quantization_config"):
        raise UnsupportedModelError(
            "quantized checkpoints are not supported; use a bf16/fp16/fp32 checkpoint"
        )
    act = _get(cfg, "hidden_act", "silu")
    if act != "silu":
        raise UnsupportedModelError(f"activation {act!r} is not supported; supported: 'silu'")
    if (_get(cfg, "pretraining_tp", 1) or 1) != 1:
        raise UnsupportedModelError("pretraining_tp > 1 is not supported")
    hidden, heads = int(_get(cfg, "hidden_size")), int(_get(cfg, "num_attention_heads"))
    kv_heads = int(_get(cfg, "num_key_value_heads") or heads)
    if heads % kv_heads:
        raise UnsupportedModelError(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    head_dim = int(_get(cfg, "head_dim") or hidden // heads)
    theta, scaling = _rope(cfg)
    max_pos = int(_get(cfg, "max_position_embeddings"))
    max_len = max_pos
    window = _get(cfg, "sliding_window")
    uses_window = arch == "MistralForCausalLM" or bool(_get(cfg, "use_sliding_window", False))
    if uses_window and window:
        max_len = min(max_len, int(window))  # within the window, full attention is exactly sliding attention
    attention_bias = bool(_get(cfg, "attention_bias", False))
    qkv_bias = {"Qwen2ForCausalLM": True, "MistralForCausalLM": False}.get(arch, attention_bias)
    o_bias = {"Qwen2ForCausalLM": False, "MistralForCausalLM": False}.get(arch, attention_bias)
    return ModelSpec(
        architecture=arch,
        vocab_size=int(_get(cfg, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(_get(cfg, "intermediate_size")),
        num_layers=int(_get(cfg, "num_hidden_layers")),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(_get(cfg, "rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=bool(_get(cfg, "mlp_bias", False)) and arch == "LlamaForCausalLM",
        qk_norm=arch == "Qwen3ForCausalLM",
        tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", False)),
        max_position_embeddings=max_pos,
        max_model_len=max_len,
    )


def load_hf_config(model_dir: str | Path) -> Any:
    """The transformers config object of a model folder (checked by model_spec before use)."""
    from transformers import AutoConfig

    path = Path(model_dir)
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(f"could not read {path / 'config.json'}: {exc}") from exc
    model_spec(raw)  # refuse unsupported models before transformers tries (and maybe fails less clearly)
    return AutoConfig.from_pretrained(str(path))


def safetensors_files(model_dir: Path) -> list[Path]:
    """The checkpoint's weight files: model.safetensors, or the shards listed by model.safetensors.index.json."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelNotFoundError(f"could not read the shard index {index}: {exc}") from exc
        files = [model_dir / name for name in sorted(set(weight_map.values()))]
    elif (model_dir / "model.safetensors").is_file():
        files = [model_dir / "model.safetensors"]
    else:
        raise ModelNotFoundError(
            f"{model_dir} has no model.safetensors or model.safetensors.index.json "
            f"(only safetensors checkpoints are supported)"
        )
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ModelNotFoundError(f"checkpoint shard(s) missing: {', '.join(missing)}")
    return files


def _ignorable(name: str, spec: ModelSpec) -> bool:
    return name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and spec.tie_word_embeddings)


def load_model(model_dir: str | Path, spec: ModelSpec, *, dtype: Any, device: Any, max_model_len: int) -> Any:
    """Build our model for `spec` on `device` and fill every parameter from the checkpoint (strictly: no gaps,
    no unknown tensors, exact shapes)."""
    import torch
    from safetensors import safe_open

    from inference.engine.models.llama import LlamaModel

    model_dir = Path(model_dir)
    model = LlamaModel(spec, max_model_len, dtype, torch.device(device))
    targets = model.weight_targets()
    loaded: set[str] = set()
    for file in safetensors_files(model_dir):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if name not in targets:
                    if _ignorable(name, spec):
                        continue
                    raise UnsupportedModelError(
                        f"checkpoint tensor {name!r} ({file.name}) has no place in our {spec.architecture} model; "
                        f"the checkpoint does not match its config"
                    )
                param, row, rows = targets[name]
                tensor = f.get_tensor(name)
                want = (rows, *param.shape[1:])
                if tuple(tensor.shape) != want:
                    raise UnsupportedModelError(
                        f"tensor {name!r} has shape {tuple(tensor.shape)}, expected {want}"
                    )
                with torch.no_grad():
                    param[row : row + rows].copy_(tensor.to(dtype))
                loaded.add(name)
    missing = sorted(set(targets) - loaded)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UnsupportedModelError(f"checkpoint in {model_dir} lacks tensor(s): {shown}")
    return model
