"""The whole engine on the demo model (fp32, CPU): parity with transformers, batching, preemption,
stops, seeds, abort, fault isolation, validation and threads."""

import threading

import pytest
import torch

from inference.engine import LLM, LLMEngine, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog, again and again",
    "中文 and emoji 🎉",
    "a",
]


def make_llm(model_dir, **options):
    return LLM(str(model_dir), dtype="float32", device="cpu", **options)


@pytest.fixture(scope="module")
def llm(demo_model_dir):
    return make_llm(demo_model_dir, max_num_batched_tokens=64, max_model_len=512)


def all_free(engine: LLMEngine) -> bool:
    bm = engine.block_manager
    return bm.num_free_blocks == bm.num_blocks and set(bm.ref_counts) == {0}


def drain(engine: LLMEngine, limit=2000):
    """Step until idle; return {request_id: [outputs]}."""
    seen: dict[str, list] = {}
    for _ in range(limit):
        if not engine.has_unfinished_requests():
            return seen
        for out in engine.step():
            seen.setdefault(out.request_id, []).append(out)
    raise AssertionError("engine did not finish")


def test_greedy_tokens_match_transformers_generate(llm, demo_model_dir):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(str(demo_model_dir), dtype=torch.float32).eval()
    ours = llm.generate(PROMPTS, GREEDY)
    for prompt, out in zip(PROMPTS, ours, strict=True):
        ids = torch.tensor([out.prompt_token_ids])
        with torch.no_grad():
            ref = hf.generate(
                ids,
                max_new_tokens=24,
                min_new_tokens=24,
                do_sample=False,
                attention_mask=torch.ones_like(ids),
            )
        assert out.token_ids == ref[0, ids.shape[1] :].tolist(), prompt
        assert out.finish_reason == "length"


def test_batch_equals_one_at_a_time_and_text_equals_decoded_tokens(llm):
    batch = llm.generate(PROMPTS, GREEDY)
    for prompt, together in zip(PROMPTS, batch, strict=True):
        (alone,) = llm.generate(prompt, GREEDY)
        assert alone.token_ids == together.token_ids
        assert together.text == llm.engine.tokenizer.decode(together.token_ids, skip_special_tokens=True)
    assert all_free(llm.engine)


def test_preemption_and_recompute_give_the_same_greedy_text(demo_model_dir, llm):
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    roomy = llm.generate(PROMPTS, params)
    engine = make_llm(demo_model_dir, num_kv_blocks=9, block_size=8, max_num_batched_tokens=32).engine
    for i, p in enumerate(PROMPTS):
        engine.add_request(f"r{i}", prompt=p, params=params)
    preemptions = 0
    tokens: dict[str, list[int]] = {}
    text: dict[str, str] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            text[out.request_id] = text.get(out.request_id, "") + out.delta_text
        sched = engine.scheduler
        preemptions = max(preemptions, sum(s.num_preemptions for s in sched.running + sched.waiting))
    assert preemptions > 0  # 9 blocks of 8 tokens cannot hold four 40-token answers at once
    assert [tokens[f"r{i}"] for i in range(len(PROMPTS))] == [o.token_ids for o in roomy]
    assert [text[f"r{i}"] for i in range(len(PROMPTS))] == [o.text for o in roomy]
    assert all_free(engine)


def test_prefix_cache_reuses_a_conversation_history(llm):
    history = "The quick brown fox jumps over the lazy dog. " * 6
    (cold,) = llm.generate(history + "Next?", GREEDY)
    (warm,) = llm.generate(history + "Next?", GREEDY)
    assert warm.num_cached_prompt_tokens >= len(cold.prompt_token_ids) - 16 > 0
    assert warm.token_ids == cold.token_ids


def test_stop_string_across_a_token_boundary(llm):
    (free,) = llm.generate("Hello world", GREEDY)
    tok = llm.engine.tokenizer
    pieces = [
        tok.decode(free.token_ids[: k + 1], skip_special_tokens=True) for k in range(len(free.token_ids))
    ]
    # find a boundary with real text on both sides, and a stop string straddling it
    for k in range(3, len(pieces) - 1):
        left, right = pieces[k], pieces[k + 1]
        if len(left) >= 2 and len(right) - len(left) >= 2 and "\ufffd" not in right:
            stop = left[-2:] + right[len(left) : len(left) + 2]
            break
    else:
        pytest.skip("the demo model's output has no usable boundary")
    expected = free.text[: free.text.index(stop)]
    engine = llm.engine
    engine.add_request(
        "stop",
        prompt="Hello world",
        params=SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, stop=[stop]),
    )
    outs = drain(engine)["stop"]
    streamed = "".join(o.delta_text for o in outs)
    assert streamed == expected and outs[-1].finish_reason == "stop" and outs[-1].finished
    assert all(not o.finished for o in outs[:-1])


def test_stop_token_ids_end_with_stop(llm):
    (free,) = llm.generate("Hello world", GREEDY)
    target = free.token_ids[5]
    (out,) = llm.generate(
        "Hello world", SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[target])
    )
    cut = free.token_ids.index(target)
    assert out.token_ids == free.token_ids[: cut + 1] and out.finish_reason == "stop"
    assert out.text == llm.engine.tokenizer.decode(free.token_ids[:cut], skip_special_tokens=True)


def test_seed_gives_the_same_text_in_different_batch_mixes(llm):
    seeded = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=20, seed=1234, ignore_eos=True)
    (alone,) = llm.generate("Tell me a story", seeded)
    mix = [
        SamplingParams(temperature=0, max_tokens=5),
        SamplingParams(temperature=1.3, top_k=7, max_tokens=30, ignore_eos=True),
        seeded,
        SamplingParams(temperature=0.5, seed=99, max_tokens=12, ignore_eos=True),
    ]
    outs = llm.generate(["x", "another prompt here", "Tell me a story", "zz top"], mix)
    assert outs[2].token_ids == alone.token_ids
    (again,) = llm.generate(
        "Tell me a story",
        SamplingParams(temperature=0.9, top_p=0.95, max_tokens=20, seed=1235, ignore_eos=True),
    )
    assert again.token_ids != alone.token_ids


def test_abort_in_each_state_frees_every_block(demo_model_dir):
    engine = make_llm(demo_model_dir, max_num_seqs=2, max_num_batched_tokens=16, num_kv_blocks=64).engine
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 4
    p = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    engine.add_request("decoding", prompt="Hello", params=p, user_id="a")
    engine.step()
    engine.add_request("prefilling", prompt=long_prompt, params=p, user_id="b")
    engine.add_request("waiting", prompt="Hi", params=p, user_id="c")
    engine.step()
    sched = engine.scheduler
    assert sched.get("decoding").num_output_tokens >= 1
    pre = sched.get("prefilling")
    assert 0 < pre.num_computed_tokens < pre.num_prompt_tokens
    assert engine.queue_positions() == {"waiting": 1}
    for rid in ("waiting", "prefilling", "decoding"):
        seq = sched.get(rid)
        assert engine.abort(rid) and seq.block_table == []
    assert all_free(engine) and not engine.abort("decoding")
    outs = engine.step()
    assert sorted((o.request_id, o.finish_reason) for o in outs) == [
        ("decoding", "abort"),
        ("prefilling", "abort"),
        ("waiting", "abort"),
    ]
    assert not engine.has_unfinished_requests() and not engine.wait_for_work(timeout=0)


def test_a_failing_step_ends_only_its_requests_and_the_engine_carries_on(demo_model_dir):
    engine = make_llm(demo_model_dir, max_num_seqs=2).engine
    p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    for rid in ("victim", "aborted", "bystander"):
        engine.add_request(rid, prompt="Hello", params=p)
    real_execute = engine.runner.execute

    def fail_once(items):  # fault injection around the real runner: its next forward pass raises
        engine.runner.execute = real_execute
        engine.abort("aborted")  # asked for during the failing pass: an abort, not an error
        raise RuntimeError("device fell over")

    engine.runner.execute = fail_once
    outs = engine.step()
    assert sorted((o.request_id, o.finish_reason, o.finished) for o in outs) == [
        ("aborted", "abort", True),
        ("victim", "error", True),
    ]
    assert "device fell over" in next(o.error for o in outs if o.request_id == "victim")
    rest = drain(engine)["bystander"]
    assert rest[-1].finish_reason == "length" and sum(len(o.new_token_ids) for o in rest) == 6
    assert all_free(engine)


def test_validation_rules_name_the_limit_and_the_excess(demo_model_dir):
    engine = make_llm(demo_model_dir, max_model_len=64, num_kv_blocks=3, block_size=16).engine
    with pytest.raises(ValueError, match=r"context length of 64 by 6"):
        engine.add_request("a", prompt=list(range(5, 55)), params=SamplingParams(max_tokens=20))
    with pytest.raises(ValueError, match=r"64 tokens.*1 too many"):
        engine.add_request("b", prompt=[5] * 64, params=SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match=r"needs 4 KV cache blocks but the cache holds 3"):
        engine.add_request("c", prompt=[5] * 40, params=SamplingParams(max_tokens=20))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add_request("d", prompt=[5, 10**6], params=SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="exactly one of prompt or messages"):
        engine.add_request("e", params=SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="request_id"):
        engine.add_request("", prompt="hi")
    with pytest.raises(ValueError, match="params must be a SamplingParams"):
        engine.add_request("f", prompt="hi", params={"temperature": 0})
    engine.add_request("g", prompt="hi", params=SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("g", prompt="hi", params=SamplingParams(max_tokens=2))
    assert engine.num_waiting() == 1 and engine.queue_positions() == {"g": 1}
    with pytest.raises(ValueError, match="unknown engine option"):
        make_llm(demo_model_dir, max_num_seq=4)


def test_max_tokens_none_runs_to_the_context_limit(demo_model_dir):
    llm = make_llm(demo_model_dir, max_model_len=32)
    (out,) = llm.generate("Hello", SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    assert len(out.prompt_token_ids) + len(out.token_ids) == 32 and out.finish_reason == "length"
    pool_bound = make_llm(demo_model_dir, max_model_len=64, num_kv_blocks=2, block_size=16)
    (out,) = pool_bound.generate("Hello", SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    assert len(out.prompt_token_ids) + len(out.token_ids) == 32


def test_chat_messages_and_step_output_fields(llm):
    engine = llm.engine
    msgs = [{"role": "user", "content": "Hi there"}]
    n = engine.add_request(
        "chat", messages=msgs, params=SamplingParams(temperature=0, max_tokens=5, ignore_eos=True), user_id=7
    )
    outs = drain(engine)["chat"]
    last = outs[-1]
    assert last.num_prompt_tokens == n and last.num_output_tokens == 5 and last.finished
    assert [o.num_output_tokens for o in outs] == [1, 2, 3, 4, 5]
    assert all(len(o.new_token_ids) == 1 for o in outs)


def test_requests_from_another_thread_while_steps_run(llm):
    engine = llm.engine
    ids = [f"t{i}" for i in range(12)]
    stop, all_done = threading.Event(), threading.Event()
    results: dict[str, list] = {}

    def driver():
        while not stop.is_set():
            if engine.wait_for_work(timeout=0.05):
                for out in engine.step():
                    results.setdefault(out.request_id, []).append(out)
            if all(results.get(r) and results[r][-1].finished for r in ids):
                all_done.set()

    thread = threading.Thread(target=driver)
    thread.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        for i, rid in enumerate(ids):
            engine.add_request(rid, prompt=f"request {i}", params=params, user_id=i % 3)
            engine.queue_positions()
            engine.num_free_slots()
            if i % 4 == 3:
                assert engine.abort(rid)
        finished = all_done.wait(timeout=120)
    finally:
        stop.set()
        thread.join()
    assert finished
    reasons = {rid: outs[-1].finish_reason for rid, outs in results.items()}
    assert all(reasons[rid] == ("abort" if i % 4 == 3 else "length") for i, rid in enumerate(ids))
    assert not engine.has_unfinished_requests() and all_free(engine)


def test_abort_and_add_during_a_forward_pass_take_effect_after_it(demo_model_dir):
    """Another thread calling in while the forward pass runs: done here from inside the real runner's call."""
    engine = make_llm(demo_model_dir).engine
    p = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    engine.add_request("inflight", prompt="Hello there", params=p)
    real_execute = engine.runner.execute
    calls = []

    def execute_with_calls_in_between(items):
        if not calls:
            calls.append((engine.abort("inflight"), engine.add_request("late", prompt="Hi", params=p)))
            assert engine.scheduler.get("inflight").block_table  # its KV is being written: not freed yet
            with pytest.raises(RuntimeError, match="already running"):
                engine.step()  # a second driver is refused, not interleaved
        return real_execute(items)

    engine.runner.execute = execute_with_calls_in_between
    outs = engine.step()
    assert calls == [(True, len(engine.scheduler.get("late").prompt_token_ids))]
    assert [(o.request_id, o.finish_reason, o.new_token_ids) for o in outs] == [("inflight", "abort", [])]
    assert engine.scheduler.get("late").num_computed_tokens == 0  # queued for the next step
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    rest = drain(engine)["late"]
    assert rest[-1].finish_reason == "length" and all_free(engine)


def test_auto_device_and_dtype_and_config_errors(demo_model_dir):
    from inference.engine.device import cpu_supports_bf16, resolve_device, resolve_dtype

    device = resolve_device("auto")
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == (torch.bfloat16 if cpu_supports_bf16() else torch.float32)
    assert resolve_dtype("float16", cpu) == torch.float16
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda:0")
    for bad, message in [
        ({"device": "tpu"}, "device must be"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"block_size": 0}, "block_size must be a positive integer"),
        ({"max_num_seqs": 2.5}, "max_num_seqs must be a positive integer"),
        ({"enable_prefix_caching": "yes"}, "enable_prefix_caching must be a bool"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "must be at least max_num_seqs"),
    ]:
        with pytest.raises(ValueError, match=message):
            LLM(str(demo_model_dir), **bad)
