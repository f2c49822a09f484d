"""bench/api.py's CPU accounting finds the worker's engine child in /proc: a real process playing the worker starts
a real EngineProcess on the demo model (so it also has multiprocessing's resource tracker as a child), and the
"worker engine" figure holds the child's CPU; processes that ended are left out, never an error."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from chatapp.launcher import Child

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_api", ROOT / "bench" / "api.py")
api = importlib.util.module_from_spec(spec)
sys.modules["bench_api"] = api  # its dataclasses look their module up there
spec.loader.exec_module(api)

WAIT_S = 120.0  # a guard against hanging (torch loads in the child), never an assertion about speed

# The worker's side of inference.engine_process, as the inference worker uses it: start the child, generate, say
# the child's pid; then close it on "close" and exit at the end of stdin.
WORKER = """
import sys
from inference.engine import SamplingParams
from inference.engine_process import EngineProcess

engine = EngineProcess(sys.argv[1], dtype="float32", device="cpu", max_num_seqs=4, kv_cache_memory=32 << 20)
engine.add_request("r", "Hello world", params=SamplingParams(max_tokens=32, ignore_eos=True))
while not any(out.finished for out in engine.step()):
    pass
print(engine.pid, flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        engine.close()
        print("closed", flush=True)
"""


@pytest.fixture
def worker(demo_model_dir):
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(demo_model_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield process
    process.kill()
    process.wait(10)


def read_line(process: subprocess.Popen) -> str:
    line = process.stdout.readline().strip()
    assert line, f"the worker process exited (code {process.wait(WAIT_S)}) before answering"
    return line


def test_the_engine_child_is_found_and_its_cpu_counts_as_the_worker_engine(worker):
    engine_pid = int(read_line(worker))
    children = api.child_pids(worker.pid)
    assert engine_pid in children
    others = [pid for pid in children if pid != engine_pid]
    assert any(b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in others), others
    assert api.engine_process(worker.pid) == engine_pid

    engine_s = api.cpu_seconds(engine_pid)  # loading torch and the model, then 32 tokens
    assert engine_s > 0
    cpu = api.worker_cpu(worker.pid)  # reads the child after this test did: at least engine_s
    assert cpu["worker engine"] >= engine_s
    assert set(cpu) == {"worker loop", "worker DB", "worker engine"}

    worker.stdin.write("close\n")
    worker.stdin.flush()
    assert read_line(worker) == "closed"
    assert (
        api.engine_process(worker.pid) is None
    )  # the worker reaped it: thread mode's accounting from here on
    with pytest.raises(OSError):
        api.cpu_seconds(engine_pid)
    assert "worker engine" in api.worker_cpu(worker.pid)


def test_a_killed_engine_child_does_not_break_the_snapshot(worker):
    engine_pid = int(read_line(worker))
    stack = SimpleNamespace(children=[Child("worker", worker)])
    assert "worker engine" in api.cpu_snapshot(stack)
    os.kill(engine_pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while Path(f"/proc/{engine_pid}/stat").exists() and "Z" not in state_of(engine_pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # unreaped (a zombie) it still shows its CPU; either way the snapshot reads without an error
    snap = api.cpu_snapshot(stack)
    assert {"worker loop", "worker DB"} <= set(snap)

    worker.kill()
    worker.wait(WAIT_S)
    assert api.cpu_snapshot(stack).keys() == {"aiperf (client)"}  # an ended worker is left out


def state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_without_an_engine_child_the_worker_engine_is_the_worker_less_loop_and_db():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert api.engine_process(process.pid) is None
        cpu = api.worker_cpu(process.pid)
        assert cpu["worker engine"] >= 0 and cpu["worker loop"] >= 0 and cpu["worker DB"] == 0
    finally:
        process.kill()
        process.wait(10)
