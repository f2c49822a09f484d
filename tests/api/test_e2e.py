"""The OpenAI-compatible API end to end: Daphne + worker + Redis as processes (the run command's code path),
driven by the official `openai` client and by raw HTTP, with the rows they write checked through the ORM."""

from __future__ import annotations

import json
import uuid

import httpx
import openai
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from chatapp.models import Generation
from tests.api.conftest import wait_for

pytestmark = [pytest.mark.e2e]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Tell me about the sea."},
]


def client_for(api) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.base_url, api_key=api.key, max_retries=0, timeout=120)


def generation_of(response_id: str) -> Generation:
    return Generation.objects.get(id=uuid.UUID(response_id.split("-", 1)[1]))


def final_row(generation_id) -> Generation:
    def ended():
        row = Generation.objects.get(id=generation_id)
        return row if row.is_final else None

    return wait_for(ended, f"generation {generation_id} to end")


def test_models_lists_the_served_model(api):
    models = client_for(api).models.list()
    assert [m.id for m in models.data] == [api.model]
    assert models.data[0].object == "model"


def test_chat_stream_deltas_equal_the_non_stream_text_for_the_same_seed(api):
    client = client_for(api)
    kwargs = dict(model=api.model, messages=CHAT, max_tokens=24, seed=1234, temperature=1.0, top_p=0.95)
    whole = client.chat.completions.create(**kwargs, extra_body={"ignore_eos": True})
    text = whole.choices[0].message.content
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length" and text
    assert whole.usage.completion_tokens == 24 and whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 24
    assert isinstance(whole.usage.prompt_tokens_details.cached_tokens, int)

    chunks = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}
        )
    )
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(deltas) == text
    assert len([d for d in deltas if d]) >= 2  # it really streamed, in pieces
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"

    # Every call is a row, owned by the key's user and linked to the key, holding the same text.
    for response_id in (whole.id, chunks[0].id):
        row = generation_of(response_id)
        assert row.source == "api" and row.api_key.user_id == api.user.id and row.text == text
        assert row.params["seed"] == 1234 and row.params["ignore_eos"] is True and row.state == "done"


def test_completions_endpoint_streams_the_same_text(api):
    client = client_for(api)
    kwargs = dict(
        model=api.model, prompt="Once upon a time", max_tokens=12, seed=7, extra_body={"ignore_eos": True}
    )
    whole = client.completions.create(**kwargs)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    streamed = "".join(
        c.choices[0].text for c in client.completions.create(**kwargs, stream=True) if c.choices
    )
    assert streamed == whole.choices[0].text and whole.usage.completion_tokens == 12


def test_stop_string_and_greedy_are_passed_to_the_engine(api):
    client = client_for(api)
    base = dict(model=api.model, messages=CHAT, max_tokens=40, temperature=0, extra_body={"ignore_eos": True})
    full = client.chat.completions.create(**base).choices[0].message.content
    stop = full[10:13]
    assert stop and stop in full
    cut = client.chat.completions.create(**base, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.message.content == full[: full.index(stop)]


def test_raw_sse_events(api):
    body = {"model": api.model, "messages": CHAT, "max_tokens": 8, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {api.key}"}
    url = f"{api.base_url}/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        raw = "".join(response.iter_text())
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: {") for e in events[:-2])
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert payloads[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert all(p["choices"][0]["finish_reason"] is None for p in payloads[:-1])
    assert "usage" not in payloads[0]  # only with stream_options.include_usage
    assert {p["id"] for p in payloads} == {payloads[0]["id"]} and payloads[0]["id"].startswith("chatcmpl-")


def test_repeated_prompt_reports_cached_prompt_tokens(api):
    client = client_for(api)
    long_history = [{"role": "user", "content": "The lighthouse keeper counted the waves. " * 12}]
    first = client.chat.completions.create(model=api.model, messages=long_history, max_tokens=2)
    second = client.chat.completions.create(model=api.model, messages=long_history, max_tokens=2)
    assert first.usage.prompt_tokens == second.usage.prompt_tokens >= 32
    assert second.usage.prompt_tokens_details.cached_tokens >= 16  # at least one full KV block was reused
    assert generation_of(second.id).cached_prompt_tokens == second.usage.prompt_tokens_details.cached_tokens


def test_errors_through_daphne(api, settings):
    headers = {"Authorization": f"Bearer {api.key}"}
    url = f"{api.base_url}/chat/completions"
    with httpx.Client(timeout=60) as http:
        response = http.post(
            url, json={"model": api.model, "messages": CHAT}, headers={"Authorization": "Bearer x"}
        )
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
        response = http.post(url, json={"model": "nope", "messages": CHAT}, headers=headers)
        assert response.status_code == 404 and response.json()["error"]["param"] == "model"
        response = http.post(url, json={"model": api.model, "messages": CHAT, "top_p": 0}, headers=headers)
        assert response.status_code == 400 and response.json()["error"]["param"] == "top_p"
        long = {"model": api.model, "messages": [{"role": "user", "content": "lighthouse waves " * 2000}]}
        response = http.post(url, json=long, headers=headers)
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"
        response = http.post(url, json={**long, "messages": CHAT, "max_tokens": 2048}, headers=headers)
        assert response.status_code == 400 and response.json()["error"]["param"] == "max_tokens"
        big = {"model": api.model, "messages": [{"role": "user", "content": "x" * (2 * 1024 * 1024)}]}
        response = http.post(url, json=big, headers=headers)
        assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError) as info:
        client_for(api).chat.completions.create(model=api.model, messages=CHAT, n=2)
    assert info.value.status_code == 400 and info.value.body["param"] == "n"
    assert not Generation.objects.exists()  # none of them was queued


def test_client_disconnect_cancels_the_generation(api):
    body = {"model": api.model, "messages": CHAT, "max_tokens": 1800, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {api.key}"}
    url = f"{api.base_url}/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as response:
        lines = response.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        next(
            line for line in lines if line.startswith("data: ") and '"content":"' in line and '""' not in line
        )
        generation_id = generation_of(first["id"]).id
        assert Generation.objects.get(id=generation_id).state == "running"
    # leaving the block closed the connection mid-stream
    row = final_row(generation_id)
    assert row.state == "stopped" and row.finish_reason == "abort"
    assert row.completion_tokens < 1800


def test_api_request_and_websocket_chat_decode_in_the_same_engine_steps(api, chat_stack):
    """A long API stream (A) is decoding; a websocket chat answer (B) is then queued, written and finished while A
    is still running in the same worker. The worker has one engine and every engine step decodes every running
    sequence, so each of B's steps decoded A too. This cannot pass by accident: a server that served requests one
    at a time (or kept API and chat traffic apart) could not finish B before A ends."""
    from websockets.sync.client import connect

    body = {"model": api.model, "messages": CHAT, "max_tokens": 1800, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {api.key}"}
    web = Client()
    web.force_login(get_user_model().objects.create_user("chatter", password="pw-chatter-1"))
    ws_headers = {"Cookie": f"sessionid={web.cookies['sessionid'].value}", "Origin": chat_stack.url}
    with httpx.stream(
        "POST", f"{api.base_url}/chat/completions", json=body, headers=headers, timeout=120
    ) as a:
        lines = a.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        next(
            line for line in lines if line.startswith("data: ") and '"content":"' in line and '""' not in line
        )
        a_id = generation_of(first["id"]).id
        with connect(chat_stack.ws_url, additional_headers=ws_headers, open_timeout=60) as ws:
            assert json.loads(ws.recv(timeout=60))["type"] == "hello"
            ws.send(
                json.dumps(
                    {"type": "send", "conversation_id": None, "content": "Hi!", "params": {"max_tokens": 16}}
                )
            )
            while (event := json.loads(ws.recv(timeout=60)))["type"] != "done":
                assert event["type"] != "error", event
        b_row = Generation.objects.get(id=event["generation"]["id"])
        a_row = Generation.objects.get(id=a_id)
        assert b_row.source == "chat" and b_row.state == "done" and b_row.completion_tokens >= 1
        assert a_row.source == "api" and a_row.state == "running" and a_row.finished_at is None
        assert a_row.worker_id == b_row.worker_id is not None
        assert a_row.started_at < b_row.started_at < b_row.finished_at
    a_final = final_row(a_id)  # the API client leaving stopped A, unless A wrote all its tokens just before
    assert a_final.state == "stopped" or (a_final.state == "done" and a_final.completion_tokens == 1800)


def test_a_non_stream_client_that_leaves_cancels_too(api, chat_stack):
    """The client sends a long non-stream request and closes its socket once the answer is being written."""
    import socket

    body = json.dumps({"model": api.model, "messages": CHAT, "max_tokens": 1800, "ignore_eos": True}).encode()
    host, port = chat_stack.host, chat_stack.port
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {api.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(request)
        # Leave as soon as the worker has taken the answer: its whole run (~3 s here) is the window for the
        # cancel, which takes well under a second (a CI run that waited for the first checkpoint lost the race).
        row = wait_for(
            lambda: Generation.objects.filter(api_key__user=api.user, state="running").first(),
            "the worker to take the answer",
        )
    final = final_row(row.id)
    assert final.state == "stopped", (
        f"{final.state} after {final.completion_tokens} tokens ({row.completion_tokens} when the client left)"
        + "".join(f"\n--- {child.name} log:\n{child.log_tail(15)}" for child in chat_stack.children)
    )


def test_health_still_answers_while_the_api_relay_listens(api, chat_stack):
    """The relay keeps a receive open on Daphne's channel layer for as long as the process lives; /health's own
    receive must not wait behind it (channels_redis serves one prefix at a time: a second one once starved)."""
    from chatapp.launcher import _health

    client_for(api).completions.create(model=api.model, prompt="Hi", max_tokens=4)
    report = _health(chat_stack.url)  # None when it took over its 2 s budget
    assert report is not None and report["redis"] == {"ok": True}, report
