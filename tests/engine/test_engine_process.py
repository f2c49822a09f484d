"""The engine in a child process (inference.engine_process) on the demo model: the same text as the engine in this
process, refusals and aborts as outputs, a clear start error, and a child that dies or loses its worker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from inference.engine import LLMEngine, SamplingParams
from inference.engine_process import EngineDied, EngineProcess, EngineStartError

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = ["Hello world", "The quick brown fox jumps over the lazy dog", "中文 and emoji 🎉"]
OPTIONS = {"dtype": "float32", "device": "cpu", "max_num_seqs": 8, "kv_cache_memory": 32 << 20}
WAIT_S = 60.0  # a guard against hanging, never an assertion about speed


@pytest.fixture(scope="module")
def engine_process(demo_model_dir):
    process = EngineProcess(str(demo_model_dir), **OPTIONS)
    yield process
    process.close()


def collect(engine, until: set[str]) -> dict[str, list]:
    """Outputs per request until every request in `until` has finished."""
    seen: dict[str, list] = {}
    deadline = time.monotonic() + WAIT_S
    while not until <= {rid for rid, outs in seen.items() if outs[-1].finished}:
        assert time.monotonic() < deadline, f"no end for {until} within {WAIT_S} s"
        if engine.wait_for_work(0.5):
            for out in engine.step():
                seen.setdefault(out.request_id, []).append(out)
    return seen


def text(outputs: list) -> str:
    return "".join(out.delta_text for out in outputs)


def test_same_text_and_counts_as_the_engine_in_this_process(engine_process, demo_model_dir):
    local = LLMEngine(str(demo_model_dir), **OPTIONS)
    for engine in (local, engine_process):
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(f"p{i}", prompt, params=GREEDY)
    here, there = collect(local, {"p0", "p1", "p2"}), collect(engine_process, {"p0", "p1", "p2"})
    for rid in here:
        assert text(there[rid]) == text(here[rid]) and text(here[rid])
        assert there[rid][-1].num_output_tokens == here[rid][-1].num_output_tokens == 24
        assert there[rid][-1].finish_reason == "length"
    assert engine_process.max_model_len == local.max_model_len


def test_a_refused_request_is_an_error_output_and_the_others_go_on(engine_process):
    engine_process.add_request("ok", "Hello", params=GREEDY)
    engine_process.add_request("long", "word " * 5000, params=GREEDY)
    engine_process.add_request("bad-user", "Hello", params=GREEDY, user_id=1.5)
    seen = collect(engine_process, {"ok", "long", "bad-user"})
    (refused,) = seen["long"]
    assert refused.finished and refused.finish_reason == "error"
    assert (
        refused.error.startswith("The request was refused by the model:")
        and "context length" in refused.error
    )
    (refused,) = seen["bad-user"]
    assert refused.finish_reason == "error" and "user_id" in refused.error
    assert seen["ok"][-1].finish_reason == "length" and len(text(seen["ok"])) > 0


def test_abort_ends_the_request_with_abort(engine_process):
    engine_process.add_request("long", "Hello", params=SamplingParams(max_tokens=1500, ignore_eos=True))
    first = collect_first(engine_process, "long")
    assert not first.finished
    assert engine_process.abort("long") is True
    last = collect(engine_process, {"long"})["long"][-1]
    assert last.finish_reason == "abort" and last.num_output_tokens < 1500


def collect_first(engine, rid: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if engine.wait_for_work(0.5):
            for out in engine.step():
                if out.request_id == rid:
                    return out
    raise AssertionError(f"no output for {rid}")


def test_a_model_that_does_not_load_is_a_clear_start_error(tmp_path):
    with pytest.raises(EngineStartError, match="cannot load model") as info:
        EngineProcess(str(tmp_path / "no-such-model"), **OPTIONS)
    assert "no-such-model" in str(info.value)


def test_a_killed_child_is_reported_as_died(demo_model_dir):
    engine = EngineProcess(str(demo_model_dir), **OPTIONS)
    try:
        engine.add_request("a", "Hello", params=SamplingParams(max_tokens=1500, ignore_eos=True))
        collect_first(engine, "a")
        os.kill(engine.pid, signal.SIGKILL)
        with pytest.raises(EngineDied, match="killed by signal 9"):
            while True:  # outputs already in the pipe come first, then the end
                assert engine.wait_for_work(WAIT_S)
                engine.step()
        assert engine.abort("a") is False
        with pytest.raises(EngineDied):
            engine.add_request("b", "Hello")
    finally:
        engine.close()
    assert not engine.alive


def test_the_child_ends_when_its_worker_goes_away(demo_model_dir):
    engine = EngineProcess(str(demo_model_dir), **OPTIONS)
    try:
        engine._commands.close()  # what the OS does to the pipe when the worker process dies
        deadline = time.monotonic() + WAIT_S
        while engine.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not engine.alive
    finally:
        engine.close()


def test_ctrl_c_is_left_to_the_worker(engine_process):
    """Ctrl-C in a terminal signals the whole process group; the worker shuts down and then stops the child."""
    os.kill(engine_process.pid, signal.SIGINT)
    engine_process.add_request("after-ctrl-c", "Hello", params=GREEDY)
    assert collect(engine_process, {"after-ctrl-c"})["after-ctrl-c"][-1].finish_reason == "length"
    assert engine_process.alive
