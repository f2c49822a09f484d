"""bench/thread_profile.py reads py-spy's raw stacks into shares of an engine thread's time; stacks cut from a real
recording of the worker (native frames, outermost first)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import thread_profile  # noqa: E402

STEP = (
    "thread (13472): engine-step;0x7fdc40e561f5 (libc.so.6);Thread.run (threading.py:982);"
    "EngineStepper._run (inference/stepper.py:83);LLMEngine.step (inference/engine/engine.py:187)"
)
GEMM = f"{STEP};Linear.forward (inference/engine/models/llama.py:42);linear (inference/engine/models/llama.py:33);mkl_blas_def_sgemm_kernel_0_zen (libtorch_cpu.so)"
OPENMP = f"{STEP};linear (inference/engine/models/llama.py:33);GOMP_parallel (libgomp.so.1);0x7fdc3c81c19a (libgomp.so.1);0x7fdc3c81deee (libgomp.so.1)"
GIL = (
    f"{STEP};linear (inference/engine/models/llama.py:33);torch::autograd::THPVariable_linear (libtorch_python.so);"
    "pybind11::gil_scoped_release::~gil_scoped_release (libtorch_python.so);pthread_cond_timedwait (libc.so.6);"
    "0x7fdc40e52f16 (libc.so.6)"
)
IDLE = (
    "thread (13472): engine-step;Thread.run (threading.py:982);EngineStepper._run (inference/stepper.py:80);"
    "LLMEngine.wait_for_work (inference/engine/engine.py:181);Condition.wait (threading.py:324);"
    "pthread_cond_timedwait (libc.so.6)"
)
CHILD = (
    "thread (16258): engine-step;0x7f818fa4524a (libc.so.6);<module> (<string>:1);"
    "spawn_main (multiprocessing/spawn.py:122);BaseProcess.run (multiprocessing/process.py:108);"
)
CHILD_IDLE = (
    f"{CHILD}serve (inference/engine_process.py:187);_ConnectionBase.poll (multiprocessing/connection.py:257);"
    "Connection._poll (multiprocessing/connection.py:440);wait (multiprocessing/connection.py:947);poll (libc.so.6)"
)
CHILD_SEND = (
    f"{CHILD}serve (inference/engine_process.py:206);_ConnectionBase.send (multiprocessing/connection.py:206);"
    "Connection._send (multiprocessing/connection.py:384);os_write (libpython3.11.so.1.0);write (libc.so.6)"
)
CHILD_STEP = f"{CHILD}serve (inference/engine_process.py:199);LLMEngine.step (inference/engine/engine.py:187);mkl_blas_def_sgemm_kernel_0_zen (libtorch_cpu.so)"
LOOP = (
    "thread (13449): MainThread;BaseEventLoop.run_forever (asyncio/base_events.py:607);epoll_wait (libc.so.6)"
)


@pytest.mark.parametrize(
    ("stack", "category"),
    [
        (GEMM, thread_profile.KERNELS),
        (OPENMP, thread_profile.OPENMP_WAIT),
        (GIL, thread_profile.GIL_WAIT),
        (IDLE, thread_profile.IDLE),
        (CHILD_IDLE, thread_profile.IDLE),
        (CHILD_SEND, thread_profile.SENDING),
        (CHILD_STEP, thread_profile.KERNELS),
    ],
)
def test_each_kind_of_sample_lands_in_its_category(stack, category):
    assert thread_profile.classify(stack.split(";")) == category


def test_shares_count_only_the_named_thread(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(f"{GEMM} 6\n{OPENMP} 2\n{GIL} 1\n{IDLE} 1\n{LOOP} 90\n")
    shares = thread_profile.thread_shares(raw, "engine-step")
    assert shares == {
        thread_profile.KERNELS: 0.6,
        thread_profile.OPENMP_WAIT: 0.2,
        thread_profile.GIL_WAIT: 0.1,
        thread_profile.SENDING: 0.0,
        thread_profile.IDLE: 0.1,
    }


def test_a_thread_without_samples_is_an_error_not_zero_shares(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(f"{LOOP} 5\n")
    with pytest.raises(RuntimeError, match="engine-step"):
        thread_profile.thread_shares(raw, "engine-step")
