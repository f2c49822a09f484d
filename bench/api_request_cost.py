"""CPU per API request, one request at a time: what Daphne and the worker spend on each kind of call.

    .venv/bin/python bench/api_request_cost.py            # the demo model, 100 requests per kind
    .venv/bin/python bench/api_request_cost.py --requests 300 --model smollm2-135m-shape

Starts the stack as bench/api.py does, sends each kind of request `--requests` times in turn (after a few
unmeasured ones), and prints the CPU seconds the Daphne and worker processes used per request (Linux /proc), beside
the wall time. Sequential on purpose: with nothing else running, a process's CPU over the run is that kind's cost.
The worker's figure excludes its engine process (the engine's own work), so it is the worker's I/O per request.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

import api as bench_api  # noqa: E402  (bench/api.py: the stack, the model, /proc readings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo", help="as bench/api.py's --model (default: demo)")
    parser.add_argument("--requests", type=int, default=100, help="measured requests per kind")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")
    import httpx

    (ROOT / "var").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-request-cost-", dir=ROOT / "var"))
    model_dir = bench_api.model_folder(args.model, work)
    stack, key = bench_api.start_stack(model_dir, work, 16, None, {})
    try:
        pids = {c.name: c.process.pid for c in stack.children if c.name in ("daphne", "worker")}
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        model = client.get("/v1/models").raise_for_status().json()["data"][0]["id"]

        def chat(stream: bool, tokens: int):
            body = {
                "model": model, "messages": [{"role": "user", "content": "Tell me a story. " * 10}],
                "max_tokens": tokens, "ignore_eos": True, "stream": stream,
            }  # fmt: skip
            return lambda: client.post("/v1/chat/completions", json=body)

        kinds = {
            "GET /v1/models": lambda: client.get("/v1/models"),
            "chat, 1 token, not streamed": chat(False, 1),
            "chat, 1 token, streamed": chat(True, 1),
            "chat, 64 tokens, streamed": chat(True, 64),
        }
        print(f"model {model_dir}, {args.requests} requests per kind, one at a time\n")
        print("| request | daphne CPU ms | worker CPU ms | wall ms |")
        print("|---|---:|---:|---:|")
        for name, send in kinds.items():
            for _ in range(5):
                send().raise_for_status()
            before = {n: bench_api.cpu_seconds(pid) for n, pid in pids.items()}
            start = time.perf_counter()
            for _ in range(args.requests):
                send().raise_for_status()
            wall = time.perf_counter() - start
            cost = {
                n: (bench_api.cpu_seconds(pid) - before[n]) * 1000 / args.requests for n, pid in pids.items()
            }
            print(
                f"| {name} | {cost['daphne']:.1f} | {cost['worker']:.1f} | {wall * 1000 / args.requests:.1f} |"
            )
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
