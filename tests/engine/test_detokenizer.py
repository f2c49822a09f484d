"""Streaming text with the demo model's real tokenizer (sentencepiece, byte fallback): hard strings and stops."""

import random

import pytest

from inference.engine.detokenizer import IncrementalDetokenizer, make_decoder
from inference.engine.tokenizer import load_tokenizer

HARD_STRINGS = [
    "Hello world, plain ASCII.",
    "emoji 🎉👩‍👩‍👧 and flags 🇫🇷🇯🇵 mixed🙂in",
    "中文字符和日本語のテキスト、한국어도",
    "  leading spaces, a  double  gap,\ttabs\t\tand\n\nnewlines \n ",
    "combining: e\u0301 a\u0308 zero\u200bwidth",
    "math ∑∫√ and astral 𝔘𝔫𝔦 and \U0010ffff",
    " ",
]


@pytest.fixture(scope="module")
def tokenizer(demo_model_dir):
    return load_tokenizer(demo_model_dir)


@pytest.fixture(scope="module")
def decoder(tokenizer):
    return make_decoder(tokenizer)


def stream(decoder, ids, stop=None):
    detok = IncrementalDetokenizer(decoder, stop)
    deltas = []
    for t in ids:
        deltas.append(detok.add(t))
        if detok.stopped:
            break
    deltas.append(detok.flush())
    return deltas, detok


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_hard_strings_stream_exactly(tokenizer, decoder, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert decoder.decode(ids) == text  # the tokenizer round-trips, so the stream must too
    deltas, detok = stream(decoder, ids)
    assert "".join(deltas) == text == detok.text
    for d in deltas:
        assert "\ufffd" not in d  # never half a character
    # every prefix of the stream is a prefix of the text: nothing is emitted and then taken back
    so_far = ""
    for d in deltas:
        so_far += d
        assert text.startswith(so_far)


def test_random_token_noise_matches_a_one_shot_decode(tokenizer, decoder):
    """Random ids (what a random-weight model emits: stray bytes, specials) still concatenate exactly."""
    rng = random.Random(1234)
    vocab = len(tokenizer)
    for _ in range(400):
        ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
        deltas, _ = stream(decoder, ids)
        assert "".join(deltas) == decoder.decode(ids), ids


@pytest.mark.parametrize(
    ("text", "stop", "expected"),
    [
        ("The answer is 42. Done here.", ["42."], "The answer is "),
        ("alpha beta gamma", ["beta", "alp"], ""),
        ("stop at 日本語 please", ["本語"], "stop at 日"),
        ("no stop in this text", ["xyz", "tex!"], "no stop in this text"),
        ("abab abac", ["abac"], "abab "),
    ],
)
def test_stop_strings_are_never_emitted_even_in_part(tokenizer, decoder, text, stop, expected):
    ids = tokenizer.encode(text, add_special_tokens=False)
    deltas, detok = stream(decoder, ids, stop)
    assert "".join(deltas) == expected == detok.text
    assert detok.stopped == (expected != text)
    so_far = ""
    for d in deltas:
        so_far += d
        assert expected.startswith(so_far)  # nothing beyond the cut ever left, not even a stop's first char


def test_text_that_may_start_a_stop_is_held_until_decided(tokenizer, decoder):
    stop = ["</answer>"]
    detok = IncrementalDetokenizer(decoder, stop)
    emitted = ""
    for t in tokenizer.encode("x </ans and more", add_special_tokens=False):
        emitted += detok.add(t)
        assert not any(emitted.endswith(stop[0][:k]) for k in range(1, len(stop[0])))
    emitted += detok.flush()
    assert emitted == "x </ans and more" and not detok.stopped


@pytest.fixture(scope="module")
def byte_level_decoder():
    """A small byte-level BPE (the GPT-2 / Llama 3 / Qwen / SmolLM2 kind), trained here on the demo corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from inference.demo import CORPUS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS.read_text(encoding="utf-8")[:20000]], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def test_byte_level_bpe_streams_hard_strings_and_noise_exactly(byte_level_decoder):
    tokenizer = byte_level_decoder
    decoder = make_decoder(tokenizer)
    for text in HARD_STRINGS:
        ids = tokenizer.encode(text)
        deltas, _ = stream(decoder, ids)
        assert "".join(deltas) == text and not any("\ufffd" in d for d in deltas)
    rng = random.Random(99)
    for _ in range(300):
        ids = [rng.randrange(len(tokenizer)) for _ in range(rng.randrange(1, 40))]
        deltas, _ = stream(decoder, ids)
        assert "".join(deltas) == decoder.decode(ids), ids
