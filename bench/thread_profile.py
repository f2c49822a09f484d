"""Where an engine thread's wall time goes, from py-spy's native stacks: kernels and Python, waits for torch's
OpenMP helper threads, waits for the GIL, sending outputs (the engine process), idle.

bench/api.py --profile uses it to compare the engine alone (this process's main thread) with the engine thread inside
the worker, under the same load: CPU seconds alone do not show time lost waiting on other threads or processes.
py-spy is a bench-only tool (`.venv/bin/pip install py-spy`); it reads another process's stacks, so it needs ptrace
rights (root, or kernel.yama.ptrace_scope 0). Its --native sampling pauses the process for each sample, so a
profiled run is slower than an unprofiled one: read the shares, not the speed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

KERNELS, OPENMP_WAIT, GIL_WAIT, SENDING, IDLE = (
    "kernels and Python",
    "waiting for OpenMP helpers",
    "waiting for the GIL",
    "sending outputs to the worker",
    "idle (no work)",
)
CATEGORIES = (KERNELS, OPENMP_WAIT, GIL_WAIT, SENDING, IDLE)


def py_spy() -> str:
    """The py-spy executable next to this Python, or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy not found: .venv/bin/pip install py-spy")
    return found


def start_recording(pid: int, seconds: int, out: Path) -> subprocess.Popen:
    """Starts sampling every thread of `pid` (native frames included, idle ones too) for `seconds` into `out`."""
    command = [
        py_spy(), "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200", "--threads",
        "--idle", "--native", "--format", "raw", "--output", str(out),
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish_recording(recorder: subprocess.Popen, out: Path) -> Path:
    """Waits for py-spy and says why when it wrote nothing."""
    _, err = recorder.communicate()
    if recorder.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed (exit {recorder.returncode}): {err.strip()[-500:]}")
    return out


def classify(frames: list[str]) -> str:
    """One sample's category, from its stack (outermost frame first, as py-spy's raw format writes it)."""
    leaf = frames[-1]
    near_leaf = " ".join(frames[-3:])
    if any("wait_for_work" in f for f in frames):
        return IDLE
    # the engine process (inference.engine_process.serve): waiting on its commands pipe, or pickling and writing
    # a step's outputs to the worker
    if any(f.startswith("serve (inference/engine_process.py") for f in frames):
        if any(f.startswith("_ConnectionBase.poll ") for f in frames):
            return IDLE
        if any(f.startswith("_ConnectionBase.send ") for f in frames):
            return SENDING
    if "libgomp" in leaf:
        # the calling thread inside OpenMP's runtime: at a barrier, waiting for its helpers to finish their share
        return OPENMP_WAIT
    if "pthread_cond" in near_leaf or "take_gil" in near_leaf:
        # an engine thread waits on a condition only to get the GIL back (torch drops it around each op)
        return GIL_WAIT
    return KERNELS


def thread_shares(raw: Path, thread_name: str) -> dict[str, float]:
    """Each category's share of `thread_name`'s samples in a py-spy raw file ("stack count" lines)."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or not frames[0].endswith(f": {thread_name}"):
            continue
        counts[classify(frames)] += int(count)
    total = sum(counts.values())
    if not total:
        raise RuntimeError(f"no samples of a thread named {thread_name!r} in {raw}")
    return {category: counts[category] / total for category in CATEGORIES}
