"""Request validation: every refused field names itself, and good bodies map to the engine's SamplingParams kwargs."""

from __future__ import annotations

import pytest

from chatapp.api.errors import ApiError
from chatapp.api.validation import parse_json_object, parse_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"model": "m", "prompt": "Once upon"}


def parse(body: dict, kind: str = "chat"):
    return parse_request(body, kind, max_allowed_tokens=1000)


def test_full_chat_body_maps_every_sampling_field():
    req = parse(
        {
            **CHAT,
            "messages": [
                {"role": "system", "content": "be brief"},
                {
                    "role": "developer",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_completion_tokens": 7,
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 20,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "stop": "\n\n",
            "seed": 42,
            "ignore_eos": True,
            "user": "alice",
            "n": 1,
            "logprobs": False,
            "some_future_field": {"ignored": True},
        }
    )
    assert req.kind == "chat" and req.stream and req.include_usage and req.user == "alice"
    assert req.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "ab"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    assert req.sampling == {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "max_tokens": 7,
        "stop": ["\n\n"],
        "seed": 42,
        "ignore_eos": True,
    }


def test_minimal_bodies_leave_defaults_to_the_server():
    req = parse({**CHAT, "temperature": None, "stream_options": None})
    assert req.sampling == {} and not req.stream and not req.include_usage
    text = parse({**TEXT, "prompt": ["one prompt"], "max_tokens": 3}, "text")
    assert text.prompt == "one prompt" and text.sampling == {"max_tokens": 3}


BAD = [
    ({"messages": CHAT["messages"]}, "model"),
    ({**CHAT, "model": 3}, "model"),
    ({**CHAT, "messages": []}, "messages"),
    ({**CHAT, "messages": "hi"}, "messages"),
    ({**CHAT, "messages": ["hi"]}, "messages[0]"),
    ({**CHAT, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({**CHAT, "messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ({**CHAT, "temperature": -0.1}, "temperature"),
    ({**CHAT, "temperature": 2.5}, "temperature"),
    ({**CHAT, "temperature": "hot"}, "temperature"),
    ({**CHAT, "temperature": True}, "temperature"),
    ({**CHAT, "top_p": 0}, "top_p"),
    ({**CHAT, "top_p": 1.5}, "top_p"),
    ({**CHAT, "top_k": 0}, "top_k"),
    ({**CHAT, "top_k": -2}, "top_k"),
    ({**CHAT, "top_k": 1.5}, "top_k"),
    ({**CHAT, "min_p": 1.1}, "min_p"),
    ({**CHAT, "repetition_penalty": 0}, "repetition_penalty"),
    ({**CHAT, "presence_penalty": 3}, "presence_penalty"),
    ({**CHAT, "frequency_penalty": -3}, "frequency_penalty"),
    ({**CHAT, "max_tokens": 0}, "max_tokens"),
    ({**CHAT, "max_tokens": 1001}, "max_tokens"),
    ({**CHAT, "max_completion_tokens": "5"}, "max_completion_tokens"),
    ({**CHAT, "max_tokens": 5, "max_completion_tokens": 6}, "max_tokens"),
    ({**CHAT, "stop": ""}, "stop"),
    ({**CHAT, "stop": ["a", 1]}, "stop"),
    ({**CHAT, "stop": ["s"] * 17}, "stop"),
    ({**CHAT, "seed": -1}, "seed"),
    ({**CHAT, "seed": "1"}, "seed"),
    ({**CHAT, "ignore_eos": 1}, "ignore_eos"),
    ({**CHAT, "stream": "yes"}, "stream"),
    ({**CHAT, "stream_options": {"include_usage": True}}, "stream_options"),
    ({**CHAT, "stream": True, "stream_options": {"include_usage": "y"}}, "stream_options.include_usage"),
    ({**CHAT, "n": 2}, "n"),
    ({**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({**CHAT, "tool_choice": "auto"}, "tool_choice"),
    ({**CHAT, "logprobs": True}, "logprobs"),
    ({**CHAT, "top_logprobs": 2}, "top_logprobs"),
    ({**CHAT, "logit_bias": {"1": 5}}, "logit_bias"),
    ({**CHAT, "response_format": {"type": "json_object"}}, "response_format"),
    ({**CHAT, "user": 5}, "user"),
    ({**TEXT, "prompt": ""}, "prompt"),
    ({**TEXT, "prompt": ["a", "b"]}, "prompt"),
    ({**TEXT, "prompt": [1, 2, 3]}, "prompt"),
    ({**TEXT, "logprobs": 0}, "logprobs"),
    ({**TEXT, "echo": True}, "echo"),
    ({**TEXT, "best_of": 2}, "best_of"),
    ({**TEXT, "suffix": "end"}, "suffix"),
]


@pytest.mark.parametrize(("body", "param"), BAD, ids=[p for _, p in BAD])
def test_bad_field_is_a_400_naming_it(body, param):
    kind = "text" if "prompt" in body else "chat"
    with pytest.raises(ApiError) as info:
        parse(body, kind)
    err = info.value
    assert err.status == 400 and err.param == param
    body = err.body()["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == param and body["message"]


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b"[1, 2]",
        b"\xff\xfe",
        b'"text"',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}',  # PostgreSQL text cannot hold U+0000
    ],
)
def test_body_must_be_a_json_object(raw):
    with pytest.raises(ApiError) as info:
        parse_json_object(raw)
    assert info.value.status == 400 and info.value.code == "invalid_json"
