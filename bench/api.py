"""End-to-end API benchmark: a third-party OpenAI load tool (NVIDIA aiperf) against the running stack, beside the
engine alone, for the same model, prompt and output lengths, at 1, 4 and 16 concurrent requests.

    python3 -m venv var/aiperf-venv && var/aiperf-venv/bin/pip install aiperf   # once, in its own venv
                          # (it pins huggingface-hub 1.x, which would break our transformers)
    .venv/bin/python bench/api.py      # SmolLM2-135M shape (random bf16 weights, built once into var/bench-models/),
                                       # starts Redis + worker + Daphne, runs both
    .venv/bin/python bench/api.py --model demo   # the tiny demo model: a forward pass of 1-3 ms, so mostly I/O
    .venv/bin/python bench/api.py --client raw --concurrency 16 --rounds 1 --profile 20
                                       # and where the engine thread's time goes (py-spy: pip install py-spy)
    .venv/bin/python bench/api.py --engine-thread   # the worker's engine in a thread of the worker process
                                       # (WORKER_ENGINE_PROCESS=0, the old mode) instead of its own child process

Prints one table: time to first token, inter-token latency and output tokens/s as the engine itself sees them (a
closed loop of N concurrent requests calling LLMEngine.step() directly) and as two clients see them through the
stack (streaming chat completions through Daphne -> Redis -> worker -> Redis -> Daphne): aiperf, and this script's
minimal asyncio client (`--client` picks), with the ratios to the engine. aiperf costs about as much CPU per token
as the engine on a small machine, so on shared cores its ratio measures aiperf as much as the stack; the minimal
client's ratio is what the web path costs. Engine-alone and API runs alternate (never at once): each round runs the
engine and every client once, engine first in even rounds and last in odd ones, so a slow drift of the shared machine's
speed weighs on both sides alike. The table gives each figure's median over the rounds, and each ratio as the median
of the rounds' own ratios (a run against the engine run beside it, never against one from minutes earlier).
A table of numbers, never a timed test.

Then a second table, CPU seconds per 1,000 output tokens (Linux /proc, the last round of each level and client), to
say where the web path's CPU goes beside the engine's:
- engine alone (bench process): this process during its engine-only round (engine thread and torch's helpers).
- worker engine: the worker's engine child process (inference.engine_process, the default mode: the whole
  process, its "engine-step" thread and torch's helpers), plus the worker process less its loop and DB threads:
  there the thread named "engine-step" that reads the child's outputs from a pipe, and threads already ended.
  With --engine-thread (no child) it is the worker process less its loop and DB threads: the engine thread
  ("engine-step") and torch's helper threads (they inherit the name of the thread that started them). Either way
  the same work as "engine alone", done inside the stack. multiprocessing's resource tracker, the other child a
  "spawn" start leaves, sleeps on a pipe and is not counted. Left blank (nan) when the engine child could not be
  read at both ends of a round.
- worker loop: the worker's main thread, its asyncio loop: Redis sends and receives, flush scheduling, and (in
  the default mode) sending commands to the engine child.
- worker DB: the worker's threads named "worker-db": the one thread channels' database_sync_to_async runs on.
- daphne, redis: those whole processes (redis only when the stack started its own).
- web path: daphne + redis + worker loop + worker DB, what serving costs on top of the engine; then its ratio to
  the engine alone and to the worker engine.
- client: the load's own CPU (aiperf's finished child processes, or this process during the minimal client's
  round), which shares these cores with the stack.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

import thread_profile  # noqa: E402  (bench/, next to this file)

from inference.engine_process import ENGINE_THREAD_NAME  # noqa: E402


@dataclass
class Figures:
    ttft_ms: float  # median time to first token
    itl_ms: float  # median inter-token latency
    tokens_per_s: float  # output tokens per second over the whole run
    requests: int


# --- the model under test -------------------------------------------------------------------------------------
BENCH_MODELS = ROOT / "var" / "bench-models"
# name here -> bench/engine.py's SHAPES key. The 6-layer cut makes the engine's step about as fast on an fp32-only
# CPU as the whole shape's on a CPU with native bf16, so the web path's share of the CPU is as large as it is there.
SHAPE_MODELS = {"smollm2-135m-shape": "smollm2-135m", "smollm2-135m-6l-shape": "smollm2-135m-6l"}


def model_folder(choice: str, work: Path) -> Path:
    """The model to serve: a shape from bench/engine.py (random weights, built once and reused), the demo model, or
    a folder. A realistic shape is the default: with the demo model's 1-3 ms forward pass, any I/O dominates."""
    if choice == "demo":
        from inference.demo import build_demo_model

        return build_demo_model(work / "demo-model")
    if choice in SHAPE_MODELS:
        out = BENCH_MODELS / choice
        if not (out / "config.json").exists():
            from engine import build_checkpoint  # bench/engine.py, next to this file

            partial = BENCH_MODELS / f"{choice}.partial"
            partial.mkdir(parents=True, exist_ok=True)
            print(f"building a random {SHAPE_MODELS[choice]} checkpoint in {out} ...", flush=True)
            build_checkpoint(partial, SHAPE_MODELS[choice], "cpu")
            partial.rename(out)
        generation_prompt_on_a_word(out)
        return out
    folder = Path(
        choice
    ).resolve()  # the stack names a relative folder as given, which clients must then echo
    if not (folder / "config.json").exists():
        raise SystemExit(
            f"--model {choice!r}: not one of {', '.join([*SHAPE_MODELS, 'demo'])} nor a model folder"
        )
    return folder


def generation_prompt_on_a_word(model_dir: Path) -> None:
    """Ends the chat template's generation prompt with ':' instead of a newline, for random weights only.

    A random-weight model repeats the prompt's last token. The demo tokenizer writes a newline as a byte-fallback
    token, which the detokenizer holds until a non-byte token follows, so the whole answer would arrive as one
    chunk at the end (TTFT = the whole request, no inter-token latency). On a word every token shows as text.
    """
    path = model_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    template = config["chat_template"].replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant:'")
    if template != config["chat_template"]:
        config["chat_template"] = template
        path.write_text(json.dumps(config, indent=1))


# --- engine only ------------------------------------------------------------------------------------------------
def prompts_of(model_dir: Path, n: int, input_tokens: int) -> list[str]:
    """n different user messages of `input_tokens` tokens each, cut from the demo model's training text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    from inference.demo import CORPUS

    ids = tok.encode(CORPUS.read_text(), add_special_tokens=False).ids
    step = max(1, (len(ids) - input_tokens) // max(1, n))
    return [tok.decode(ids[i * step : i * step + input_tokens]) for i in range(n)]


def engine_run(engine, prompts: list[str], concurrency: int, total: int, output_tokens: int) -> Figures:
    """A closed loop: `concurrency` requests in flight, a new one added as soon as one ends, `total` in all."""
    from inference.engine import SamplingParams

    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True)
    added, first, last, ntok = {}, {}, {}, {}
    next_index = 0

    def add() -> None:
        nonlocal next_index
        rid = f"r{next_index}-{time.monotonic_ns()}"
        text = prompts[next_index % len(prompts)]
        engine.add_request(rid, messages=[{"role": "user", "content": text}], params=params, user_id=rid)
        added[rid] = time.perf_counter()
        next_index += 1

    start = time.perf_counter()
    for _ in range(min(concurrency, total)):
        add()
    active = len(added)
    while active:
        outs = engine.step()
        now = time.perf_counter()
        for out in outs:
            if out.new_token_ids and out.request_id not in first:
                first[out.request_id] = now
            if out.finished:
                last[out.request_id] = now
                ntok[out.request_id] = out.num_output_tokens
                active -= 1
                if next_index < total:
                    add()
                    active += 1
    wall = time.perf_counter() - start
    ttft = [(first[r] - added[r]) * 1000 for r in first]
    itl = [(last[r] - first[r]) * 1000 / (ntok[r] - 1) for r in last if ntok[r] > 1]
    return Figures(statistics.median(ttft), statistics.median(itl), sum(ntok.values()) / wall, len(last))


def load_engine(model_dir: Path, max_num_seqs: int, input_tokens: int):
    """The engine alone, with the worker's options (settings' defaults), warmed up; and the prompts to send."""
    from inference.engine import LLMEngine

    engine = LLMEngine(str(model_dir), dtype="auto", device="auto", max_num_seqs=max_num_seqs)
    prompts = prompts_of(model_dir, 64, input_tokens)
    engine_run(engine, prompts, 2, 2, 4)
    return engine, prompts


# --- where the CPU goes ------------------------------------------------------------------------------------------


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time of a running process (Linux /proc), all its threads or just `thread`. OSError when
    it has ended (and been reaped)."""
    stat = Path(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from a scan of /proc/*/stat (/proc/<pid>/task/*/children would be
    cheaper, but only kernels built with CONFIG_PROC_CHILDREN have it)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
        if ppid == pid:
            children.append(int(entry.name))
    return children


def engine_process(worker_pid: int) -> int | None:
    """The pid of the worker's engine child (inference.engine_process: a multiprocessing "spawn" child, its main
    thread named "engine-step"), or None when the engine steps in a thread of the worker (WORKER_ENGINE_PROCESS=0)
    or the worker has ended. multiprocessing's resource tracker, the other child a spawn start leaves, is not it."""
    for pid in child_pids(worker_pid):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile
            continue
        if comm == ENGINE_THREAD_NAME or b"--multiprocessing-fork" in argv:
            return pid
    return None


def worker_cpu(pid: int) -> dict[str, float]:
    """The worker's CPU seconds so far: its main thread (the asyncio loop), its threads named "worker-db"
    (inference.threadnames), and the engine: its child process when it has one, plus the rest of the worker (the
    engine thread or the thread reading the child's outputs, torch's helpers, ended threads). Without "worker
    engine" when the engine child ended between reads: better no figure than one less the child's seconds."""
    loop = db = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            seconds = cpu_seconds(pid, int(task.name))
        except OSError:  # the thread ended meanwhile; the process total below still holds its time
            continue
        if int(task.name) == pid:
            loop += seconds
        elif name == "worker-db":
            db += seconds
    total = cpu_seconds(pid)  # read last, so it holds at least the threads read above
    cpu = {"worker loop": loop, "worker DB": db}
    engine = total - loop - db
    child = engine_process(pid)
    if child is not None:
        try:
            engine += cpu_seconds(child)
        except OSError:
            return cpu
    return cpu | {"worker engine": engine}


def cpu_snapshot(stack) -> dict[str, float]:
    """CPU seconds so far of each stack process (the worker by thread, with its engine child), and of finished
    children of this process (aiperf). A process that ended is left out (its rows then show nan), never an error."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    snap = {"aiperf (client)": kids.ru_utime + kids.ru_stime}
    for child in stack.children:
        if not child.alive():
            continue
        try:
            if child.name == "worker":
                snap |= worker_cpu(child.process.pid)
            else:
                snap[child.name] = cpu_seconds(child.process.pid)
        except OSError:  # it ended between alive() and the read
            continue
    return snap


WEB_PATH = ("daphne", "redis", "worker loop", "worker DB")


def with_web_path(cpu: dict[str, float]) -> dict[str, float]:
    """`cpu` (seconds per 1,000 tokens by name) in the table's order, with the web path's sum and its ratios."""
    web = sum(cpu.get(name, 0.0) for name in WEB_PATH)
    engine, worker_engine = cpu["engine alone (bench process)"], cpu.get("worker engine", float("nan"))
    first = ["engine alone (bench process)", "worker engine", *WEB_PATH]
    # "worker engine" stays a column when a round could not read it (its engine child ended): nan there
    table = {name: cpu.get(name, float("nan")) for name in first if name in cpu or name == "worker engine"}
    table |= {
        "web path": web,
        "web / engine alone": web / engine if engine else float("nan"),
        "web / worker engine": web / worker_engine if worker_engine else float("nan"),
    }
    return table | {name: value for name, value in cpu.items() if name not in table}  # client last


def median_figures(runs: list[Figures]) -> Figures:
    """Each figure's median over the rounds."""
    return Figures(
        ttft_ms=statistics.median(r.ttft_ms for r in runs),
        itl_ms=statistics.median(r.itl_ms for r in runs),
        tokens_per_s=statistics.median(r.tokens_per_s for r in runs),
        requests=runs[0].requests,
    )


def median_ratio(runs: list[Figures], engine_runs: list[Figures]) -> float:
    """The median over rounds of a client's throughput over the engine's in the same round."""
    return statistics.median(r.tokens_per_s / e.tokens_per_s for r, e in zip(runs, engine_runs, strict=True))


AIPERF_POLL_RATE = 200  # requests/s: aiperf's slot poll runs this often (see aiperf_figures)


# --- through the API, measured by aiperf --------------------------------------------------------------------------
def aiperf_figures(
    aiperf: str,
    url: str,
    key: str,
    model: str,
    tokenizer: Path,
    concurrency: int,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    out_dir: Path,
) -> Figures:
    """Runs aiperf (streaming chat completions, fixed lengths) and reads its JSON export."""
    artifacts = out_dir / f"c{concurrency}"
    command = [
        aiperf, "profile",
        "--model", model, "--url", url, "--endpoint-type", "chat", "--streaming",
        "--api-key", key, "--tokenizer", str(tokenizer),
        "--concurrency", str(concurrency), "--request-count", str(requests),
        # With --concurrency alone aiperf's timing manager polls for a free slot without sleeping (its
        # CONCURRENCY_BURST mode), a whole core taken from the stack on a small machine. A request rate far above
        # what the stack serves keeps the concurrency as the only bound while the poll sleeps 5 ms between tries.
        "--request-rate", str(AIPERF_POLL_RATE), "--arrival-pattern", "constant",
        "--warmup-request-count", str(concurrency),
        "--synthetic-input-tokens-mean", str(input_tokens), "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(output_tokens), "--output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
        "--random-seed", "7", "--output-artifact-dir", str(artifacts), "--no-auto-plot",
        # aiperf shares this machine's cores with the stack: keep its own processes few and its console quiet
        "--workers-max", "1", "--record-processors", "1", "--ui-type", "none",
    ]  # fmt: skip
    env = {
        k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"
    }  # aiperf then fails on a local folder
    # a stack that stops answering must end the benchmark, not hang it
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, timeout=600 + 10 * requests)
    export = next(artifacts.rglob("profile_export_aiperf.json"))
    return parse_aiperf(json.loads(export.read_text()))


def parse_aiperf(data: dict) -> Figures:
    def metric(name: str, stat: str):
        entry = data.get(name) or data.get("records", {}).get(name)
        if entry is None:
            raise KeyError(f"aiperf's export has no {name!r} (keys: {sorted(data)[:20]})")
        return entry[stat]

    return Figures(
        ttft_ms=metric("time_to_first_token", "p50"),
        itl_ms=metric("inter_token_latency", "p50"),
        tokens_per_s=metric("output_token_throughput", "avg"),
        requests=int(metric("request_count", "avg")),
    )


# --- through the API, measured by a minimal client -------------------------------------------------------------
def raw_client_figures(
    url: str, key: str, model: str, prompts: list[str], concurrency: int, total: int, output_tokens: int
) -> Figures:
    """The same closed loop as engine_run, as streaming chat completions over plain asyncio sockets.

    aiperf spends about as much CPU per token as the engine on these shared cores (see the CPU table), so its
    throughput says as much about aiperf as about the stack. This client does almost nothing per chunk (no JSON
    but the last usage chunk), so its figures show what the web path itself costs.
    """
    import asyncio
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    ttft, itl, tokens = [], [], []
    next_index = 0

    async def one(index: int) -> None:
        body = json.dumps({
            "model": model, "messages": [{"role": "user", "content": prompts[index % len(prompts)]}],
            "max_tokens": output_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True},
        }).encode()  # fmt: skip
        head = (
            f"POST /v1/chat/completions HTTP/1.0\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        start = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + body)
        first, received = None, []
        while chunk := await reader.read(65536):  # HTTP/1.0: the server closes the stream at its end
            if first is None and b'"content":"' in chunk.replace(b'"content":""', b""):
                first = time.perf_counter()
            received.append(chunk)
        end = time.perf_counter()
        writer.close()
        whole = b"".join(received)
        if not whole.startswith(b"HTTP/1.") or b" 200 " not in whole.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"the stack answered {whole[:300]!r}")
        usage = next(line for line in reversed(whole.split(b"\n")) if b'"usage":{' in line)
        n = json.loads(usage.removeprefix(b"data: "))["usage"]["completion_tokens"]
        tokens.append(n)
        if first is not None:
            ttft.append((first - start) * 1000)
            if n > 1:
                itl.append((end - first) * 1000 / (n - 1))

    async def lane() -> None:
        nonlocal next_index
        while next_index < total:
            index, next_index = next_index, next_index + 1
            await one(index)

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        return time.perf_counter() - start

    wall = asyncio.run(run())
    return Figures(statistics.median(ttft), statistics.median(itl), sum(tokens) / wall, len(tokens))


# --- where the engine thread's time goes -----------------------------------------------------------------------
def profile_engine_thread(
    stack, engine, key: str, model: str, prompts: list[str], concurrency: int, total: int, args, out_dir: Path
) -> dict[str, dict[str, float]]:
    """py-spy on the engine alone (this process's main thread), then on the stack's engine thread under the raw
    client: the main thread ("engine-step") of the worker's engine child, or with --engine-thread (no child) the
    worker's own "engine-step" thread. Each load repeats until the sampling ends."""
    out_dir.mkdir(parents=True, exist_ok=True)
    worker_pid = next(child.process.pid for child in stack.children if child.name == "worker")
    child_pid = engine_process(worker_pid)
    stack_pid, stack_label = (
        (child_pid, "engine process, raw client") if child_pid else (worker_pid, "worker thread, raw client")
    )
    shares = {}
    for label, pid, thread, load in [
        ("engine alone", os.getpid(), "MainThread",
         lambda: engine_run(engine, prompts, concurrency, total, args.output_tokens)),
        (stack_label, stack_pid, ENGINE_THREAD_NAME,
         lambda: raw_client_figures(stack.url, key, model, prompts, concurrency, total, args.output_tokens)),
    ]:  # fmt: skip
        raw = out_dir / f"{thread}.txt"
        recorder = thread_profile.start_recording(pid, args.profile, raw)
        while recorder.poll() is None:
            load()
        shares[label] = thread_profile.thread_shares(thread_profile.finish_recording(recorder, raw), thread)
    return shares


# --- the stack ------------------------------------------------------------------------------------------------------
def ensure_database(url: str) -> None:
    """Creates a PostgreSQL database named in `url` when it does not exist yet (SQLite files make themselves)."""
    if not url.startswith(("postgres://", "postgresql://")):
        return
    import psycopg

    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def start_stack(model_dir: Path, var_dir: Path, max_num_seqs: int, database_url: str | None, extra_env: dict):
    """Redis + worker + Daphne from the run command's own code (chatapp.launcher.Stack), with a user and a key."""
    from chatapp.launcher import Stack, free_port

    env = {
        "LLM_MODEL": str(model_dir),
        "LLM_MAX_NUM_SEQS": str(max_num_seqs),
        # the benchmark is one key's traffic: keep every limit above the load it makes
        "API_MAX_CONCURRENT_PER_KEY": "1000",
        "CHAT_QUEUE_MAX": "10000",
        "LOG_LEVEL": "WARNING",
    }
    if database_url:
        ensure_database(database_url)
        env["DATABASE_URL"] = database_url
    env.update(extra_env)
    stack = Stack(var_dir=var_dir, port=free_port(), env=env, log_dir=var_dir / "logs").start(timeout=300)
    manage = [sys.executable, str(ROOT / "manage.py")]
    child_env = stack.child_env()
    make_user = (
        "from django.contrib.auth import get_user_model as g; g().objects.get_or_create(username='bench')"
    )
    subprocess.run([*manage, "shell", "-c", make_user], env=child_env, check=True, capture_output=True)
    key = subprocess.run(
        [*manage, "create_api_key", "bench", "--name", "bench/api.py"], env=child_env, check=True,
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return stack, key


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="smollm2-135m-shape",
        help="smollm2-135m-shape (default: random bf16 weights, SmolLM2-135M's shape), smollm2-135m-6l-shape "
        "(the same with 6 of its 30 layers: a faster step), demo, or a model folder",
    )
    parser.add_argument("--database-url", default=None, help="the stack's DATABASE_URL (default: SQLite)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--requests", type=int, default=0, help="requests per level (default: max(32, 8 x level))"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds per level, engine and clients alternating (medians reported)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more settings for the stack's processes",
    )
    parser.add_argument(
        "--client",
        choices=["both", "aiperf", "raw"],
        default="both",
        help="the load: aiperf, this script's minimal asyncio client, or both in turn (default)",
    )
    parser.add_argument("--aiperf", default=str(ROOT / "var" / "aiperf-venv" / "bin" / "aiperf"))
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="SECONDS",
        help="then sample the engine thread with py-spy for SECONDS, alone and in the stack (the worker's engine "
        "process, or its engine thread with --engine-thread) under the raw client at the highest level, and print "
        "where its time goes (bench/thread_profile.py)",
    )
    parser.add_argument(
        "--engine-thread",
        action="store_true",
        help="run the worker's engine in a thread of the worker process (WORKER_ENGINE_PROCESS=0, the old mode) "
        "instead of its own child process (the default), to compare the two",
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")
    if args.client != "raw" and not Path(args.aiperf).exists():
        print(f"aiperf not found at {args.aiperf}: python3 -m venv var/aiperf-venv && "
              "var/aiperf-venv/bin/pip install aiperf", file=sys.stderr)  # fmt: skip
        return 2
    (ROOT / "var").mkdir(exist_ok=True)  # a fresh clone has no var/ yet
    work = Path(tempfile.mkdtemp(prefix="bench-api-", dir=ROOT / "var"))
    model_dir = model_folder(args.model, work)
    per_level = (lambda c: args.requests) if args.requests else (lambda c: max(32, 8 * c))
    levels = args.concurrency
    print(f"model {model_dir}, {args.input_tokens} prompt tokens, {args.output_tokens} output tokens "
          f"(ignore_eos), levels {levels}", flush=True)  # fmt: skip
    # The stack starts first and idles (a worker without requests only heartbeats) while the engine alone runs in
    # this process; engine and API rounds alternate, so both see the same spells of load from elsewhere.
    extra_env = dict(item.split("=", 1) for item in args.env)
    if args.engine_thread:
        extra_env["WORKER_ENGINE_PROCESS"] = "0"
    stack, key = start_stack(model_dir, work / "stack", max(32, max(levels)), args.database_url, extra_env)
    worker_pid = next(child.process.pid for child in stack.children if child.name == "worker")
    child_pid = engine_process(worker_pid)
    print(f"worker {worker_pid}: its engine in "
          + (f"a child process ({child_pid})" if child_pid else "a thread of the worker"), flush=True)  # fmt: skip
    engine, prompts = load_engine(model_dir, max(32, max(levels)), args.input_tokens)
    from engine import machine  # bench/engine.py, next to this file

    # The same checkpoint runs in bf16 or fp32 by the CPU ("auto"), which moves every figure: say which, and where
    print(f"engine: {engine.dtype} on {engine.device}; machine: {machine(engine.device.type)}", flush=True)
    clients = ["aiperf", "raw"] if args.client == "both" else [args.client]
    runs: dict[str, dict[int, list[Figures]]] = {
        name: {c: [] for c in levels} for name in ["engine", *clients]
    }
    # CPU seconds per 1,000 output tokens, of the last round of each level
    cpu: dict[tuple[str, int], dict[str, float]] = {}
    engine_cpu: dict[int, float] = {}
    try:
        for round_no in range(args.rounds):
            for c in levels:
                tokens = per_level(c) * args.output_tokens
                order = ["engine", *clients] if round_no % 2 == 0 else [*clients, "engine"]
                client_cpu_rows: dict[str, dict[str, float]] = {}
                for name in order:
                    before_api, before_here = cpu_snapshot(stack), time.process_time()
                    if name == "engine":
                        run = engine_run(engine, prompts, c, per_level(c), args.output_tokens)
                    elif name == "aiperf":
                        run = aiperf_figures(
                            args.aiperf, stack.url, key, model_dir.name, model_dir, c, per_level(c),
                            args.input_tokens, args.output_tokens, work / "aiperf" / f"round{round_no}",
                        )  # fmt: skip
                    else:
                        run = raw_client_figures(
                            stack.url, key, model_dir.name, prompts, c, per_level(c), args.output_tokens
                        )
                    here_cpu = (time.process_time() - before_here) * 1000 / tokens
                    runs[name][c].append(run)
                    if name == "engine":
                        engine_cpu[c] = here_cpu
                        continue
                    after_api = cpu_snapshot(stack)
                    row = {
                        k: (after_api[k] - v) * 1000 / tokens for k, v in before_api.items() if k in after_api
                    }
                    aiperf_cpu = row.pop("aiperf (client)", 0.0)
                    row["client"] = aiperf_cpu if name == "aiperf" else here_cpu
                    client_cpu_rows[name] = row
                for name, row in client_cpu_rows.items():
                    cpu[(name, c)] = with_web_path({"engine alone (bench process)": engine_cpu[c], **row})
                print(f"round {round_no + 1}, {c} concurrent: "
                      + ", ".join(f"{n} {runs[n][c][-1].tokens_per_s:.0f} tok/s" for n in order),
                      flush=True)  # fmt: skip
        if args.profile:
            c = max(levels)
            shares = profile_engine_thread(
                stack, engine, key, model_dir.name, prompts, c, per_level(c), args, work / "profile"
            )
    finally:
        stack.stop()
    figures = {name: {c: median_figures(runs[name][c]) for c in levels} for name in runs}
    print()
    names = ["engine", *clients]
    ratios = [f"{name} / engine tok/s" for name in clients]
    print(f"| concurrent | TTFT p50 ms ({' / '.join(names)}) | ITL p50 ms ({' / '.join(names)}) | "
          f"output tok/s ({' / '.join(names)}) | " + " | ".join(ratios) + " |")  # fmt: skip
    print("|---:|---:|---:|---:|" + "---:|" * len(ratios))
    for c in levels:
        level = [figures[name][c] for name in names]
        print(f"| {c} | " + " / ".join(f"{r.ttft_ms:.1f}" for r in level)
              + " | " + " / ".join(f"{r.itl_ms:.2f}" for r in level)
              + " | " + " / ".join(f"{r.tokens_per_s:.0f}" for r in level)
              + " | " + " | ".join(f"{median_ratio(runs[n][c], runs['engine'][c]):.2f}" for n in clients)
              + " |")  # fmt: skip
    columns = list(next(iter(cpu.values())))
    print("\nCPU seconds per 1,000 output tokens (last round of each level; 'web /' columns: ratios):\n")
    print("| client | concurrent | " + " | ".join(columns) + " |")
    print("|---|---:|" + "---:|" * len(columns))
    for client in clients:
        for c in levels:
            values = cpu[(client, c)]
            print(
                f"| {client} | {c} | "
                + " | ".join(f"{values.get(n, float('nan')):.2f}" for n in columns)
                + " |"
            )
    if args.profile:
        print(f"\nWhere the engine thread's time goes at {max(levels)} concurrent (py-spy samples, "
              f"{args.profile} s each; raw stacks in {work / 'profile'}):\n")  # fmt: skip
        print("| | " + " | ".join(shares) + " |")
        print("|---|" + "---:|" * len(shares))
        for category in thread_profile.CATEGORIES:
            print(f"| {category} | " + " | ".join(f"{s[category]:.1%}" for s in shares.values()) + " |")
    if "aiperf" in clients:
        print(f"\n(aiperf artifacts: {work / 'aiperf'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
