"""Loading checkpoints: sharded files, hub ids from the cache, and clear errors for everything we cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inference.engine.loader import (
    SUPPORTED_ARCHITECTURES,
    ModelNotFoundError,
    UnsupportedModelError,
    model_spec,
    resolve_model_dir,
)
from inference.engine.model_runner import ForwardItem, ModelRunner
from tests.fixtures.models import build_tiny_checkpoint


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("llama")
    build_tiny_checkpoint(path, "llama-gqa")
    return path


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _edit_config(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _runner(path: Path, **kw) -> ModelRunner:
    return ModelRunner(path, dtype=torch.float32, device="cpu", block_size=4, **{"num_kv_blocks": 8, **kw})


def test_sharded_checkpoint_loads_the_same_model(tmp_path: Path) -> None:
    hf = build_tiny_checkpoint(tmp_path, "qwen2-tied", max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    got = _runner(tmp_path).execute([ForwardItem(ids, 0, [0, 1], True)])[0]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    build_tiny_checkpoint(tmp_path, "llama-gqa", max_shard_size="20KB")
    victim = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    victim.unlink()
    with pytest.raises(ModelNotFoundError, match=victim.name):
        _runner(tmp_path)


def test_hub_id_is_read_from_the_local_cache(tmp_path: Path, llama_dir: Path, monkeypatch) -> None:
    import huggingface_hub.constants as hub_constants

    repo = tmp_path / "models--someone--tiny-llama"
    commit = "0123456789abcdef0123456789abcdef01234567"
    _copy(llama_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    assert resolve_model_dir("someone/tiny-llama") == repo / "snapshots" / commit
    assert _runner("someone/tiny-llama").spec.num_layers == 2


@pytest.mark.parametrize("offline", ["1", None])
def test_unknown_hub_id_without_network_names_the_id(tmp_path: Path, monkeypatch, offline) -> None:
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(ModelNotFoundError, match="'llmchat-tests/no-such-model'"):
        resolve_model_dir("llmchat-tests/no-such-model")


@pytest.mark.parametrize("model", ["", "./missing-folder", "/no/such/place", "a/b/c", "not a hub id"])
def test_bad_paths_are_clear(model: str) -> None:
    with pytest.raises(ModelNotFoundError):
        resolve_model_dir(model)


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_dir(tmp_path)


def test_folder_without_safetensors(tmp_path: Path, llama_dir: Path) -> None:
    path = _copy(llama_dir, tmp_path / "m")
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="safetensors"):
        _runner(path)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"architectures": ["GPT2LMHeadModel"]},
            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM",
        ),
        ({"architectures": []}, "not supported"),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
            "'yarn' is not supported",
        ),
        ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, "needs a positive 'factor'"),
        ({"hidden_act": "gelu"}, "activation 'gelu'"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantized"),
        ({"num_key_value_heads": 3}, "not a multiple"),
    ],
)
def test_unsupported_configs_are_refused(tmp_path: Path, llama_dir: Path, changes: dict, match: str) -> None:
    path = _copy(llama_dir, tmp_path / "m")
    _edit_config(path, **changes)
    with pytest.raises(UnsupportedModelError, match=match):
        _runner(path)


def test_the_error_lists_every_supported_architecture() -> None:
    with pytest.raises(UnsupportedModelError) as err:
        model_spec({"architectures": ["FalconForCausalLM"]})
    assert all(name in str(err.value) for name in SUPPORTED_ARCHITECTURES)


def test_transformers_4_style_rope_config_is_understood() -> None:
    base = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 32,
        "num_attention_heads": 4,
        "vocab_size": 10,
    }
    base |= {"intermediate_size": 8, "num_hidden_layers": 1, "max_position_embeddings": 64}
    spec = model_spec(base | {"rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2}})
    assert spec.rope_theta == 5e5 and spec.rope_scaling == {"rope_type": "linear", "factor": 2.0}


def _rewrite_weights(path: Path, edit) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def test_missing_tensor_is_named(tmp_path: Path, llama_dir: Path) -> None:
    path = _copy(llama_dir, tmp_path / "m")
    _rewrite_weights(path, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(UnsupportedModelError, match=r"lacks tensor\(s\): model.layers.1.mlp.up_proj.weight"):
        _runner(path)


def test_unexpected_tensor_is_named(tmp_path: Path, llama_dir: Path) -> None:
    path = _copy(llama_dir, tmp_path / "m")
    _rewrite_weights(path, lambda t: t.update({"model.layers.0.extra.weight": torch.zeros(2)}))
    with pytest.raises(UnsupportedModelError, match="model.layers.0.extra.weight"):
        _runner(path)


def test_wrong_shape_is_named(tmp_path: Path, llama_dir: Path) -> None:
    path = _copy(llama_dir, tmp_path / "m")
    _rewrite_weights(path, lambda t: t.update({"model.norm.weight": torch.ones(31)}))
    with pytest.raises(UnsupportedModelError, match=r"model.norm.weight.*\(31,\)"):
        _runner(path)


def test_sliding_window_caps_the_context(tmp_path: Path) -> None:
    build_tiny_checkpoint(tmp_path, "mistral")
    _edit_config(tmp_path, sliding_window=48)
    assert _runner(tmp_path).max_model_len == 48


def test_max_model_len(llama_dir: Path) -> None:
    assert _runner(llama_dir).max_model_len == 128
    assert _runner(llama_dir, max_model_len=40).max_model_len == 40
    with pytest.raises(ValueError, match="more than this model supports"):
        _runner(llama_dir, max_model_len=129)


def test_pool_is_sized_from_the_memory_budget(llama_dir: Path) -> None:
    per_block = 2 * 2 * 4 * 2 * 8 * 4  # K and V, 2 layers, 4 slots, 2 KV heads, head_dim 8, fp32
    runner = ModelRunner(
        llama_dir, dtype=torch.float32, device="cpu", block_size=4, kv_cache_memory=10 * per_block + 5
    )
    assert runner.bytes_per_block == per_block and runner.num_blocks == 10
    assert runner.k_cache[0].shape == (40, 2, 8)
    with pytest.raises(ValueError, match="holds no KV block"):
        ModelRunner(llama_dir, dtype=torch.float32, device="cpu", block_size=4, kv_cache_memory=per_block - 1)


def test_default_budget_on_cpu(llama_dir: Path) -> None:
    runner = ModelRunner(llama_dir, dtype=torch.bfloat16, device="cpu", block_size=16)
    assert (
        runner.num_blocks * runner.bytes_per_block
        <= 512 * 1024 * 1024
        < (runner.num_blocks + 1) * runner.bytes_per_block
    )
