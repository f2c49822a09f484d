"""Prompt encoding: text, token ids and chat messages, with clear errors for malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.engine.loader import ModelNotFoundError
from inference.engine.tokenizer import encode_prompt, eos_token_ids, load_tokenizer


@pytest.fixture(scope="module")
def tok(demo_model_dir: Path):
    return load_tokenizer(demo_model_dir)


def test_text_prompt_round_trips(tok) -> None:
    text = "Hello  world\n\t😊 日本"
    ids = encode_prompt(tok, prompt=text)
    assert tok.decode(ids) == text


def test_token_id_prompt_is_passed_through(tok) -> None:
    assert encode_prompt(tok, prompt=[5, 6, 7]) == [5, 6, 7]


def test_messages_use_the_chat_template_with_a_generation_prompt(tok) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    ids = encode_prompt(tok, messages=messages)
    assert tok.decode(ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_extra_message_keys_are_ignored(tok) -> None:
    plain = encode_prompt(tok, messages=[{"role": "user", "content": "Hi"}])
    assert encode_prompt(tok, messages=[{"role": "user", "content": "Hi", "name": "x"}]) == plain


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one"),
        ({"prompt": "a", "messages": [{"role": "user", "content": "a"}]}, "exactly one"),
        ({"prompt": ""}, "empty"),
        ({"prompt": []}, "empty"),
        ({"prompt": 12}, "string or a list"),
        ({"prompt": [1, "2"]}, "integers"),
        ({"prompt": [1, True]}, "integers"),
        ({"prompt": [1, 10**9]}, "outside the vocabulary"),
        ({"prompt": [-1]}, "outside the vocabulary"),
        ({"messages": []}, "must not be empty"),
        ({"messages": "hello"}, "list of"),
        ({"messages": ["hello"]}, r"messages\[0\] must be a dict"),
        ({"messages": [{"content": "x"}]}, r"messages\[0\]\['role'\]"),
        ({"messages": [{"role": "", "content": "x"}]}, r"messages\[0\]\['role'\]"),
        ({"messages": [{"role": "user", "content": None}]}, r"messages\[0\]\['content'\] must be a string"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": ["x"]}]},
            r"messages\[1\]",
        ),
    ],
)
def test_malformed_input_is_rejected(tok, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_prompt(tok, **kwargs)


def test_model_without_chat_template_rejects_messages(tmp_path: Path, demo_model_dir: Path) -> None:
    folder = tmp_path / "no_template"
    folder.mkdir()
    for f in demo_model_dir.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = load_tokenizer(folder)
    assert encode_prompt(tok, prompt="hi")
    with pytest.raises(ValueError, match="no chat template"):
        encode_prompt(tok, messages=[{"role": "user", "content": "hi"}])


def test_eos_ids_include_generation_config(tmp_path: Path, demo_model_dir: Path, tok) -> None:
    assert eos_token_ids(tok, demo_model_dir) == {tok.eos_token_id}
    folder = tmp_path / "more_eos"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    assert eos_token_ids(tok, folder) == {2, 7}


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
