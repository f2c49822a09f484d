"""Build the demo model: a tiny random-weight Llama with a real tokenizer, so everything runs with no download.

`python -m inference.demo OUTDIR` writes a Hugging Face format folder in a second or two, identical on every run:
config.json (marked `"llmchat_demo": true`, so a UI can say that its answers are noise), model.safetensors,
generation_config.json, and a sentencepiece unigram tokenizer trained on `demo_data/corpus.txt` (shipped with the
project), saved both as `tokenizer.model` and as a fast `tokenizer.json` with a ChatML chat template.

The tokenizer uses identity normalization, keeps every space and has byte fallback, so any Unicode text round-trips.
Only numpy, safetensors, sentencepiece and tokenizers are used here (no torch), so the web side's tests can build it.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm
from safetensors.numpy import save_file
from sentencepiece import sentencepiece_model_pb2
from tokenizers import AddedToken, Tokenizer, decoders, normalizers
from tokenizers.models import Unigram

CORPUS = Path(__file__).with_name("demo_data") / "corpus.txt"
SEED = 20240501
VOCAB_SIZE = 2000

UNK, BOS, EOS, PAD, IM_START = "<unk>", "<s>", "<|im_end|>", "<pad>", "<|im_start|>"
SPECIAL_TOKENS = [UNK, BOS, EOS, PAD, IM_START]  # ids 0..4, in this order

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 2048,
}

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# sentencepiece piece types (sentencepiece_model.proto)
_BYTE_TYPE = sentencepiece_model_pb2.ModelProto.SentencePiece.BYTE


def train_sentencepiece(corpus: Path = CORPUS, vocab_size: int = VOCAB_SIZE) -> bytes:
    """Train the unigram model; single-threaded on the whole corpus so the result is the same every time."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_writer=buf,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        unk_piece=UNK,
        bos_piece=BOS,
        eos_piece=EOS,
        pad_piece=PAD,
        user_defined_symbols=[IM_START],
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    return buf.getvalue()


def fast_tokenizer_from_sentencepiece(model_bytes: bytes) -> Tokenizer:
    """The same vocabulary and scores as a `tokenizers` Unigram, for processes that must not load sentencepiece."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_bytes)
    pieces = list(proto.pieces)
    min_score = min(p.score for p in pieces)
    vocab = []
    for p in pieces:
        # Byte pieces are only a fallback: a very low score keeps the literal text "<0x41>" from matching one.
        score = min_score - 1000.0 if p.type == _BYTE_TYPE else p.score
        vocab.append((p.piece, score))
    tok = Tokenizer(Unigram(vocab, unk_id=0, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            raise RuntimeError(f"special token {t!r} got id {tok.token_to_id(t)}, expected {i}")
    return tok


def random_weights(vocab_size: int, seed: int = SEED) -> dict[str, np.ndarray]:
    """Llama parameter names and shapes, filled from a fixed-seed generator.

    Scaled like a trained model (unit-variance activations, logits spread over a few units), so greedy decoding
    rarely meets near-ties and the outputs vary from prompt to prompt.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    h, inter, hd = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["head_dim"]
    nq, nkv = SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"]

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {"model.embed_tokens.weight": normal((vocab_size, h), 1.0)}
    for i in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = normal((nq * hd, h), h**-0.5)
        w[p + "self_attn.k_proj.weight"] = normal((nkv * hd, h), h**-0.5)
        w[p + "self_attn.v_proj.weight"] = normal((nkv * hd, h), h**-0.5)
        w[p + "self_attn.o_proj.weight"] = normal((h, nq * hd), (nq * hd) ** -0.5)
        w[p + "mlp.gate_proj.weight"] = normal((inter, h), h**-0.5)
        w[p + "mlp.up_proj.weight"] = normal((inter, h), h**-0.5)
        w[p + "mlp.down_proj.weight"] = normal((h, inter), inter**-0.5)
    w["model.norm.weight"] = np.ones(h, np.float32)
    w["lm_head.weight"] = normal((vocab_size, h), 3.0 * h**-0.5)
    return w


def model_config(vocab_size: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **SHAPE,
        "vocab_size": vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "torch_dtype": "float32",
        "llmchat_demo": True,
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "additional_special_tokens": [IM_START],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": SHAPE["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }


README = """# llmchat demo model (random weights)

A tiny Llama-architecture model with RANDOM weights, built by `python -m inference.demo`. Its answers are noise.
It exists so the project runs and tests with no download. The tokenizer is real: a sentencepiece unigram model
trained on the project's inference/demo_data/corpus.txt, with byte fallback and a ChatML chat template.
"""


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_demo_model(out_dir: str | Path) -> Path:
    """Write the demo model into out_dir (created if needed; our files are overwritten) and return its path."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)

    sp_bytes = train_sentencepiece()
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    vocab_size = sp.get_piece_size()
    fast = fast_tokenizer_from_sentencepiece(sp_bytes)
    if fast.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise RuntimeError("fast tokenizer vocabulary size differs from the sentencepiece model's")

    (out / "tokenizer.model").write_bytes(sp_bytes)
    fast.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", tokenizer_config())
    _write_json(
        out / "special_tokens_map.json",
        {
            "bos_token": BOS,
            "eos_token": EOS,
            "unk_token": UNK,
            "pad_token": PAD,
            "additional_special_tokens": [IM_START],
        },
    )
    _write_json(out / "config.json", model_config(vocab_size))
    _write_json(out / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3})
    save_file(random_weights(vocab_size), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "README.md").write_text(README, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inference.demo",
        description="Build the tiny random-weight demo model (answers are noise) into OUTDIR.",
    )
    parser.add_argument("outdir", help="folder to write the model into (created if missing)")
    args = parser.parse_args(argv)
    out = build_demo_model(args.outdir)
    print(f"demo model written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
