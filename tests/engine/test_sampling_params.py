"""Every validation rule of SamplingParams: a clear ValueError before anything is queued."""

import math

import pytest

from inference.engine.sampling_params import SamplingParams


def test_defaults_are_valid_and_sampled():
    p = SamplingParams()
    assert p.temperature == 1.0 and not p.greedy and not p.has_penalties
    assert p.stop == [] and p.stop_token_ids == [] and p.seed is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature must be >= 0"),
        ({"temperature": math.inf}, "temperature must be finite"),
        ({"temperature": math.nan}, "temperature must be finite"),
        ({"temperature": "1"}, "temperature must be a number"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.01}, r"top_p must be in \(0, 1\]"),
        ({"top_k": 0}, "top_k must be -1"),
        ({"top_k": -2}, "top_k must be -1"),
        ({"top_k": 2.5}, "top_k must be an integer"),
        ({"min_p": -0.1}, r"min_p must be in \[0, 1\]"),
        ({"min_p": 1.5}, r"min_p must be in \[0, 1\]"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0"),
        ({"presence_penalty": 2.5}, r"presence_penalty must be in \[-2, 2\]"),
        ({"frequency_penalty": -3}, r"frequency_penalty must be in \[-2, 2\]"),
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"max_tokens": True}, "max_tokens must be an integer"),
        ({"stop": [""]}, "stop strings must not be empty"),
        ({"stop": ""}, "stop strings must not be empty"),
        ({"stop": ["ok", 3]}, "stop must be a string or a list of strings"),
        ({"stop_token_ids": [-1]}, "stop_token_ids must be a list of non-negative integers"),
        ({"seed": -1}, "seed must be in"),
        ({"seed": "7"}, "seed must be an integer"),
        ({"ignore_eos": 1}, "ignore_eos must be a bool"),
    ],
)
def test_invalid_values_raise_a_clear_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_edge_values_that_are_valid():
    p = SamplingParams(temperature=0, top_p=1, top_k=1, min_p=1, max_tokens=1, stop="END", seed=0)
    assert p.greedy and p.stop == ["END"] and p.top_p == 1.0
    assert SamplingParams(max_tokens=None).max_tokens is None
    assert SamplingParams(repetition_penalty=1.2).has_penalties
