"""OS-level thread names, so `top -H`, `ps -L` and /proc show which of a process's threads spends the CPU.

Python's `threading.Thread(name=...)` names a thread only inside Python (before 3.14); the OS still shows every
thread under the process's name. Threads created later by a named thread (torch's OpenMP helpers, for one) inherit
its OS name. Imports no Django and no torch.
"""

from __future__ import annotations

import sys
import threading

MAX_BYTES = 15  # Linux's TASK_COMM_LEN (16) less the terminating NUL


def set_native_thread_name(name: str) -> None:
    """Names the calling thread for the OS (Linux only, cut to 15 bytes); does nothing elsewhere or on failure.

    Best effort on purpose: a name only helps someone reading `top -H`, so it must never stop the caller.
    """
    if not sys.platform.startswith("linux"):
        return
    # cut at a character boundary, never inside one
    data = name.encode("utf-8")[:MAX_BYTES].decode("utf-8", "ignore").encode("utf-8")
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as comm:
            comm.write(data)
    except OSError:
        pass
