"""The demo model: deterministic, loadable by transformers, and its tokenizer round-trips any text."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from inference.demo import build_demo_model

HARD_TEXTS = [
    "a  b\tc\nd",
    "  two leading spaces and trailing  ",
    "\n\n\n   indented\r\nwindows line",
    "Hello, world! 😊 👨‍👩‍👧 🇫🇷",
    "日本語の文章と中文和한국어",
    "ünïcödé ∑ ≠ ½ — “quotes”",
    "literal <0x41> and <unk> look-alikes",
    "zero\u200bwidth and \U0001f9ea test tube",
]


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_build_is_deterministic(tmp_path: Path, demo_model_dir: Path) -> None:
    again = build_demo_model(tmp_path / "again")
    assert _digest(again) == _digest(demo_model_dir)


def test_cli_builds_a_model(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "inference.demo", str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }


def test_config_is_a_marked_llama(demo_model_dir: Path) -> None:
    cfg = json.loads((demo_model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["llmchat_demo"] is True
    assert 1000 <= cfg["vocab_size"] <= 4000


def test_transformers_tokenizer_has_full_vocab_and_round_trips(demo_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_dir)
    cfg = json.loads((demo_model_dir / "config.json").read_text())
    assert len(tok) == cfg["vocab_size"]
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == cfg["eos_token_id"]
    for text in HARD_TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text


def test_corpus_words_are_single_pieces_not_bytes(demo_model_dir: Path) -> None:
    tok = Tokenizer.from_file(str(demo_model_dir / "tokenizer.json"))
    ids = tok.encode("The river", add_special_tokens=False).ids
    assert len(ids) <= 3


def test_web_side_tokenizer_matches_transformers(demo_model_dir: Path) -> None:
    """The torch-free web side counts tokens with `tokenizers` alone; it must agree with the engine's tokenizer."""
    from transformers import AutoTokenizer

    fast = Tokenizer.from_file(str(demo_model_dir / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(demo_model_dir)
    for text in HARD_TEXTS:
        assert fast.encode(text, add_special_tokens=False).ids == tok.encode(text, add_special_tokens=False)
        assert fast.decode(fast.encode(text, add_special_tokens=False).ids, skip_special_tokens=False) == text


def test_sentencepiece_and_fast_tokenizer_agree_on_the_corpus(demo_model_dir: Path) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(demo_model_dir / "tokenizer.model"))
    fast = Tokenizer.from_file(str(demo_model_dir / "tokenizer.json"))
    corpus = (Path(__file__).parents[2] / "inference" / "demo_data" / "corpus.txt").read_text(
        encoding="utf-8"
    )
    for line in corpus.splitlines():
        assert fast.encode(line, add_special_tokens=False).ids == sp.encode(line), line


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_is_chatml(demo_model_dir: Path, add_generation_prompt: bool) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_dir)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi  there\n😊"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi  there\n😊<|im_end|>\n"
    if add_generation_prompt:
        expected += "<|im_start|>assistant\n"
    assert text == expected
    ids = tok.encode(text, add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(tok.eos_token_id) == 2
