"""HumanEval graded outside the graded program, against the in-process check it replaced.

In-process (the design before issue 49): one sandbox run per answer of the prompt, the
completion, the test and `check(entry_point)`, passed when the run's last line is a token read
from stdin before the completion ran. Outside (today, `harness.benchmarks.function_grading`):
the recorded calls run in the sandbox and the test's check is replayed here on the results.
Both use the same sandbox (hidden root) and the same concurrency (one run per CPU).

Part 1 times the 164 canonical solutions graded both ways, interleaved: "cold" records the
calls first (an empty MARS cache, as on a fresh machine), "warm" reads them from the cache.
Part 2 runs the red-team hacks of tests/test_reward_hacks.py both ways and prints which won.

    flock /tmp/mars-bench.lock .venv/bin/python bench/code_grading.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import secrets
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import DryRun, add_dry_run, report, run_dry  # noqa: E402
from harness.benchmarks import function_grading, get_suite  # noqa: E402
from harness.benchmarks.types import Sample  # noqa: E402
from harness.sandbox import SandboxLimits, run_python_async  # noqa: E402

LIMITS = SandboxLimits(cpu_seconds=10, wall_seconds=10, memory_bytes=1 << 30)


def in_process_program(sample: Sample, completion: str) -> tuple[str, str]:
    """The replaced design: the check runs in the graded program; a token proves it returned."""
    token = secrets.token_hex(16)
    source = (
        "import sys as _mars_sys\n"
        "_mars_done = (lambda token: lambda: print(token))(_mars_sys.stdin.readline().strip())\n"
        f"{sample.question}\n{completion}\n\n{sample.metadata['test']}\n\n"
        f"check({sample.metadata['entry_point']})\n_mars_done()\n"
    )
    return source, token


async def in_process_grade(sample: Sample, completion: str, slots: asyncio.Semaphore) -> bool:
    source, token = in_process_program(sample, completion)
    async with slots:
        result = await run_python_async(source, LIMITS, stdin=token + "\n")
    lines = result.stdout.strip().splitlines()
    return result.ok and bool(lines) and lines[-1].strip() == token


async def outside_grade(sample: Sample, completion: str) -> bool:
    suite = get_suite("humaneval")
    return (await suite.grade_sample(f"```python\n{completion}\n```", sample))["correct"]


async def grade_all_in_process(jobs: list[tuple[Sample, str]]) -> list[bool]:
    slots = asyncio.Semaphore(os.cpu_count() or 1)
    return await asyncio.gather(*(in_process_grade(s, c, slots) for s, c in jobs))


async def grade_all_outside(jobs: list[tuple[Sample, str]], cold: bool) -> list[bool]:
    if cold:  # a new recorder and an empty cache: the calls are recorded again
        function_grading._recorder = function_grading.CallRecorder()
        os.environ["MARS_CACHE_DIR"] = tempfile.mkdtemp(prefix="mars-bench-cache-")
    return await asyncio.gather(*(outside_grade(s, c) for s, c in jobs))


def timed(coroutine) -> tuple[float, list[bool]]:
    started = time.perf_counter()
    verdicts = asyncio.run(coroutine)
    return time.perf_counter() - started, verdicts


def red_team_test() -> types.ModuleType:
    """tests/test_reward_hacks.py, by its path (a `tests` package elsewhere may shadow it)."""
    path = ROOT / "tests" / "test_reward_hacks.py"
    spec = importlib.util.spec_from_file_location("mars_reward_hacks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def red_team(samples: list[Sample]) -> list[tuple[str, int, int]]:
    """(hack, problems won in-process, problems won outside) over the test's problems."""
    hacks = red_team_test()
    chosen = [s for s in samples if s.id in hacks.HUMANEVAL_IDS]
    rows = []
    for name, code in hacks.humaneval_hacks().items():
        jobs = [(s, code.replace("ENTRY", s.metadata["entry_point"])) for s in chosen]
        _, before = timed(grade_all_in_process(jobs))
        _, after = timed(grade_all_outside(jobs, cold=False))
        rows.append((name, sum(before), sum(after)))
    return rows


def dry_run(dry: DryRun) -> None:
    """The data file loads, both programs compile for the first problem, the hacks import."""
    samples = get_suite("humaneval").load(limit=1).samples
    completion = samples[0].question + samples[0].metadata["solution"]
    compile(in_process_program(samples[0], completion)[0], "in-process", "exec")
    problem = get_suite("humaneval").problems()[0]
    compile(function_grading.calling_program(problem, completion), "outside", "exec")
    dry.count("hack", len(red_team_test().humaneval_hacks()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    samples = get_suite("humaneval").load().samples
    jobs = [(s, s.question + s.metadata["solution"]) for s in samples]
    timed(grade_all_in_process(jobs[:8]))  # warm: bytecode, page cache
    before, cold, warm = [], [], []
    for _ in range(args.repeats):
        seconds, verdicts = timed(grade_all_in_process(jobs))
        assert all(verdicts), verdicts.count(False)
        before.append(seconds)
        seconds, verdicts = timed(grade_all_outside(jobs, cold=True))
        assert all(verdicts), verdicts.count(False)
        cold.append(seconds)
        seconds, verdicts = timed(grade_all_outside(jobs, cold=False))
        assert all(verdicts), verdicts.count(False)
        warm.append(seconds)
    print(f"{'hack':60} {'in-process':>10} {'outside':>8}")
    rows = red_team(samples)
    for name, won_before, won_after in rows:
        print(f"{name:60} {won_before:>10} {won_after:>8}")
    report(
        "humaneval_grading_over_in_process_check",
        statistics.median(cold) / statistics.median(before),
        1.5,
        warm_ratio=round(statistics.median(warm) / statistics.median(before), 3),
        in_process_s=round(statistics.median(before), 2),
        cold_s=round(statistics.median(cold), 2),
        warm_s=round(statistics.median(warm), 2),
        canonical_passed=len(jobs),
        hacks=len(rows),
        hacks_won_in_process=sum(1 for row in rows if row[1]),
        hacks_won_outside=sum(1 for row in rows if row[2]),
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
