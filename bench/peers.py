"""mars beside the evaluation tools researchers already use, on the same questions and server.

Each tool runs from its own command line on the first N GSM8K questions against one scripted
OpenAI-compatible server that answers every request after 100 ms and logs when each request
arrived and when its reply left. From that log and the process's own start and end:

- start-up: command start to the first request's arrival;
- exit: the last reply's departure to the process's end (summary written);
- request phase / ideal: first arrival to last reply, over ceil(N / c) x 100 ms;
- whole run / ideal: command start to process end, over the same ideal (its target is at 64);
- where the request phase goes: each wave's start drift past 100 ms and its arrival spread;
- client CPU per request: the tool process's user + system CPU (with its children) over N;
  for mars also the run phase's alone (`client_cpu_s` of its summary: no start-up, no exit),
  which is what the 0.3 ms target is about.

mars always runs, and so does the floor: `bench/floor_client.py`, a minimal closed-loop client
(pre-encoded requests, replies read by length, nothing parsed, graded or recorded), whose request
phase is what the server and the machine allow; the last line reports it per level. Inspect
(`inspect eval` with a task file over the same local GSM8K file) and lm-eval (`lm_eval --model
local-chat-completions` with a local task) run when their commands are found (`pip install -e
".[peers]"`, or `--inspect` / `--lm-eval` pointing at them). Also `mars --help`'s wall time.
Every figure is one JSON line; the last line holds mars's targets.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DRY_RUN_URL,
    DryRun,
    add_dry_run,
    eval_command,
    gsm8k_file,
    int_list,
    local_gsm8k,
    report,
    run_dry,
    scripted_server_command,
)

DELAY_S = 0.1
REPLY = "The answer is \\boxed{42}."
TARGETS = {
    "startup_s": 0.5,
    "exit_s": 0.1,
    "request_phase_over_ideal": 1.03,
    "whole_over_ideal": 1.5,
    "help_s": 0.3,
    "run_cpu_ms_per_request": 0.3,
}
WHOLE_RUN_AT = 64  # the concurrency the whole-run target is set at


@dataclass(frozen=True)
class Figures:
    tool: str
    concurrency: int
    startup_s: float
    exit_s: float
    request_phase_over_ideal: float
    whole_over_ideal: float
    client_cpu_ms_per_request: float
    requests: int
    run_cpu_ms_per_request: float | None = None
    # Where the request phase goes beyond ideal: each wave of `c` requests starts this much later
    # than 100 ms after the one before (the client's reaction to a reply), and a wave's requests
    # arrive spread over this many ms (replies processed one after another), mean over waves.
    wave_drift_ms: float = 0.0
    wave_spread_ms: float = 0.0


@dataclass(frozen=True)
class Invocation:
    """A tool's command line, and where it writes its own summary (mars: the run phase's CPU)."""

    argv: list[str]
    summary: Path | None = None


class Server:
    """The scripted server in its own process, with a fresh timeline file per run."""

    def __init__(self, timeline: Path) -> None:
        self.timeline = timeline
        command = scripted_server_command(DELAY_S, REPLY, timeline)
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.base_url = f"http://127.0.0.1:{int(self.process.stdout.readline())}/v1"

    def spans(self) -> list[tuple[float, float]]:
        lines = self.timeline.read_text().split()
        return [(float(a), float(b)) for a, b in zip(lines[::2], lines[1::2], strict=True)]

    def reset(self) -> None:
        self.timeline.write_text("")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def timed_run(
    tool: str, run: Invocation, server: Server, n: int, concurrency: int, env: dict[str, str]
) -> Figures:
    server.reset()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    result = subprocess.run(run.argv, env=env, capture_output=True, text=True)
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"{tool} failed (exit {result.returncode}): " + " | ".join(tail))
    spans = server.spans()
    if len(spans) < n:
        raise SystemExit(f"{tool} sent {len(spans)} requests, expected at least {n}")
    first_arrival = min(a for a, _ in spans)
    last_reply = max(b for _, b in spans)
    ideal = math.ceil(len(spans) / concurrency) * DELAY_S
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    arrivals = sorted(a for a, _ in spans)
    waves = [arrivals[i : i + concurrency] for i in range(0, len(arrivals), concurrency)]
    starts = [wave[0] for wave in waves]
    drift = [(b - a - DELAY_S) * 1000 for a, b in itertools.pairwise(starts)]
    spread = [(wave[-1] - wave[0]) * 1000 for wave in waves]
    run_cpu = None
    if run.summary is not None:
        run_cpu = 1000 * json.loads(run.summary.read_text())["client_cpu_s"] / len(spans)
    return Figures(
        tool=tool,
        concurrency=concurrency,
        startup_s=first_arrival - started,
        exit_s=ended - last_reply,
        request_phase_over_ideal=(last_reply - first_arrival) / ideal,
        whole_over_ideal=(ended - started) / ideal,
        client_cpu_ms_per_request=1000 * cpu / len(spans),
        requests=len(spans),
        run_cpu_ms_per_request=run_cpu,
        wave_drift_ms=statistics.mean(drift) if drift else 0.0,
        wave_spread_ms=statistics.mean(spread),
    )


def mars_command(base_url: str, n: int, concurrency: int, work: Path) -> Invocation:
    run_dir = work / f"mars-{time.monotonic_ns()}"
    return Invocation(eval_command(base_url, run_dir, n, concurrency), run_dir / "summary.json")


INSPECT_TASK = """
import json
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import generate

@task
def gsm8k_local(path: str, limit: int) -> Task:
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()][:limit]
    samples = [
        Sample(input=row["question"], target=row["answer"].split("####")[-1].strip())
        for row in rows
    ]
    return Task(dataset=samples, solver=generate(), scorer=match(numeric=True))
"""


def inspect_command(binary: str, base_url: str, n: int, concurrency: int, work: Path) -> Invocation:
    task_file = work / "inspect_gsm8k.py"
    task_file.write_text(INSPECT_TASK)
    argv = [
        binary, "eval", f"{task_file}@gsm8k_local",
        "-T", f"path={local_gsm8k()}", "-T", f"limit={n}",
        "--model", "openai-api/scripted/scripted", "--max-connections", str(concurrency),
        "--log-dir", str(work / f"inspect-logs-{time.monotonic_ns()}"), "--display", "none",
        "--no-fail-on-error",
    ]  # fmt: skip
    return Invocation(argv)


LM_EVAL_TASK = """task: gsm8k_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
generation_kwargs:
  until: ["Question:"]
  do_sample: false
metric_list:
  - metric: exact_match
"""


def lm_eval_command(binary: str, base_url: str, n: int, concurrency: int, work: Path) -> Invocation:
    tasks = work / "lm_eval_tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "gsm8k_local.yaml").write_text(LM_EVAL_TASK.format(path=local_gsm8k()))
    model_args = (
        f"model=scripted,base_url={base_url}/chat/completions,num_concurrent={concurrency},"
        "max_retries=3,tokenized_requests=False"
    )
    argv = [
        binary, "--model", "local-chat-completions", "--model_args", model_args,
        "--tasks", "gsm8k_local", "--include_path", str(tasks), "--limit", str(n),
        "--apply_chat_template", "--output_path", str(work / f"lm-eval-{time.monotonic_ns()}"),
    ]  # fmt: skip
    return Invocation(argv)


def floor_command(base_url: str, n: int, concurrency: int) -> Invocation:
    """The minimal client (bench/floor_client.py): what the server and machine allow."""
    script = Path(__file__).resolve().parent / "floor_client.py"
    argv = [
        sys.executable, str(script), "--base-url", base_url, "--questions", str(n),
        "--concurrency", str(concurrency),
    ]  # fmt: skip
    return Invocation(argv)


HELP_COMMAND = [sys.executable, "-m", "mars", "--help"]


def help_seconds(repeats: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(HELP_COMMAND, capture_output=True, check=True, env=env)
        times.append(time.perf_counter() - started)
    return min(times)


def tool_commands(
    args: argparse.Namespace, base_url: str, work: Path
) -> dict[str, Callable[[int], Invocation]]:
    """Each tool compared -> its command line at a concurrency: mars and the floor always,
    Inspect and lm-eval when their commands are found."""
    tools: dict[str, Callable[[int], Invocation]] = {
        "mars": lambda c: mars_command(base_url, args.questions, c, work),
        "floor": lambda c: floor_command(base_url, args.questions, c),
    }
    if args.inspect:
        tools["inspect"] = lambda c: inspect_command(
            args.inspect, base_url, args.questions, c, work
        )
    if args.lm_eval:
        tools["lm_eval"] = lambda c: lm_eval_command(
            args.lm_eval, base_url, args.questions, c, work
        )
    return tools


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The GSM8K file; the scripted server's command line; every tool's at every level (mars's
    through its own parser, the floor client's through its own, a peer's program found, and
    lm-eval's task file read as YAML); `mars --help`."""
    import yaml
    from floor_client import build_parser

    gsm8k_file(dry)
    levels = int_list(args.concurrency, "--concurrency")
    with tempfile.TemporaryDirectory(prefix="mars-peers-dry-run-") as tmp:
        work = Path(tmp)
        dry.module(scripted_server_command(DELAY_S, REPLY, work / "timeline.tsv"))
        for tool, build in tool_commands(args, DRY_RUN_URL, work).items():
            for concurrency in levels:
                argv = build(concurrency).argv
                if tool == "mars":
                    dry.mars(argv)
                elif tool == "floor":
                    dry.script(argv, build_parser())
                else:
                    dry.program(argv)
        for task in work.glob("lm_eval_tasks/*.yaml"):
            dry.config(lambda task=task: yaml.safe_load(task.read_text()), "task file")
    dry.mars(HELP_COMMAND)
    for name, found in (("inspect", args.inspect), ("lm_eval", args.lm_eval)):
        if not found:
            dry.note(f"{name} not found: not compared")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--concurrency", default="64,128", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--inspect", default=shutil.which("inspect"), help="the inspect command")
    parser.add_argument("--lm-eval", default=shutil.which("lm_eval"), help="the lm_eval command")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    levels = int_list(args.concurrency, "--concurrency")

    with tempfile.TemporaryDirectory(prefix="mars-peers-") as tmp:
        work = Path(tmp)
        server = Server(work / "timeline.tsv")
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "EMPTY",
            "OPENAI_API_BASE_URL": server.base_url,
            "INSPECT_EVAL_MODEL_BASE_URL": server.base_url,
            "SCRIPTED_BASE_URL": server.base_url,
            "SCRIPTED_API_KEY": "EMPTY",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install keeps its bytecode
        tools = tool_commands(args, server.base_url, work)
        results: list[Figures] = []
        try:
            for tool, build in tools.items():  # untimed: bytecode written, caches warm
                timed_run(tool, build(levels[0]), server, args.questions, levels[0], env)
            for _ in range(args.repeats):  # interleaved, so a noisy minute hits every tool
                for concurrency in levels:
                    for tool, build in tools.items():
                        figures = timed_run(
                            tool, build(concurrency), server, args.questions, concurrency, env
                        )
                        results.append(figures)
                        print(json.dumps({"run": vars(figures)}), flush=True)
        finally:
            server.stop()
        help_s = help_seconds(5, env)

    for tool in tools:
        for concurrency in levels:
            runs = [r for r in results if r.tool == tool and r.concurrency == concurrency]
            figures = [f for f in vars(runs[0]) if f not in ("tool", "concurrency", "requests")]
            summary = {
                name: round(statistics.median(getattr(r, name) for r in runs), 4)
                for name in figures
                if getattr(runs[0], name) is not None
            }
            print(json.dumps({"tool": tool, "concurrency": concurrency, **summary}))
    mars = [r for r in results if r.tool == "mars"]
    worst = {name: max(getattr(r, name) for r in mars) for name in TARGETS if name != "help_s"}
    # The whole-run target is at 64 in flight (issue 24): at 128 the ideal is half as long, so
    # the same start-up counts twice as much.
    at_64 = [r.whole_over_ideal for r in mars if r.concurrency == WHOLE_RUN_AT]
    if at_64:
        worst["whole_over_ideal"] = max(at_64)
    worst["help_s"] = help_s
    misses = [name for name, target in TARGETS.items() if worst[name] > target]
    # The request phase the server and machine allow at each level (the minimal client's
    # median): a target below it is out of any client's reach here.
    floor = {
        c: round(
            statistics.median(
                r.request_phase_over_ideal
                for r in results
                if r.tool == "floor" and r.concurrency == c
            ),
            4,
        )
        for c in levels
    }
    report(
        "mars_figures_within_targets",
        len(TARGETS) - len(misses),
        len(TARGETS),
        lower_is_better=False,
        worst={k: round(v, 4) for k, v in worst.items()},
        targets=TARGETS,
        missed=misses,
        request_phase_floor=floor,
        questions=args.questions,
        concurrency=levels,
        peers=[t for t in tools if t not in ("mars", "floor")],
    )


if __name__ == "__main__":
    main()
