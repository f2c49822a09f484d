"""The coalescing rule for deltas: first text at once, then at most one per flush interval, the end at once."""

from __future__ import annotations

from types import SimpleNamespace

from inference.live import LiveGeneration


def _out(text="", *, finished=False, reason=None, error=None, tokens=1):
    return SimpleNamespace(
        delta_text=text, new_token_ids=[1] if text else [], finished=finished, finish_reason=reason, error=error,
        num_prompt_tokens=5, num_cached_prompt_tokens=0, num_output_tokens=tokens,
    )  # fmt: skip


def test_first_text_is_due_at_once_then_after_the_interval():
    live = LiveGeneration(generation_id="g", group="x", created_at_epoch=0.0)
    assert live.due_at(0.05) is None  # nothing to send
    live.apply_output(_out("He"))
    assert live.due_at(0.05) == 0.0  # the first text goes out immediately
    live.seq, live.sent_len, live.last_flush = 1, len(live.text), 100.0
    live.apply_output(_out("llo", tokens=2))
    assert live.pending_text == "llo" and live.due_at(0.05) == 100.05  # coalesced until the interval passed
    live.apply_output(_out(" there", finished=True, reason="stop", tokens=3))
    assert live.due_at(0.05) == 0.0 and live.final_state == "done"  # the end is not held back
    assert live.stats()["completion_tokens"] == 3 and "ttft_ms" in live.stats()


def test_finish_reasons_map_to_states_and_later_outputs_are_ignored():
    for reason, state in (("stop", "done"), ("length", "done"), ("abort", "stopped"), ("error", "failed")):
        live = LiveGeneration(generation_id="g", group="x", created_at_epoch=0.0)
        live.apply_output(_out("a", finished=True, reason=reason))
        assert live.final_state == state
        live.apply_output(_out("late"))
        assert live.text == "a"
    failed = LiveGeneration(generation_id="g", group="x", created_at_epoch=0.0)
    failed.apply_output(_out("", finished=True, reason="error", error="CUDA out of memory"))
    assert failed.error == "CUDA out of memory"


def test_a_nul_the_model_writes_is_kept_as_a_replacement_character():
    # PostgreSQL text cannot hold U+0000 (the checkpoint of such text failed); stream and row show U+FFFD.
    live = LiveGeneration(generation_id="g", group="x", created_at_epoch=0.0)
    live.apply_output(_out("a\x00b"))
    live.apply_output(_out("\x00", finished=True, reason="stop", tokens=2))
    assert live.text == "a\ufffdb\ufffd" and live.pending_text == live.text
