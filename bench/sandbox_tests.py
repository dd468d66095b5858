"""A batch of 10 stdin/stdout tests in the sandbox, against the same work with no containment.

Sandboxed: `harness.sandbox.run_tests` (one start: namespaces, limits, own uid, cleanup; then
the program once per case in a forked child). Bare: a plain `python -I -c` subprocess running
the same batch runner (`harness/sandbox/batch_child.py`) on the same framed stream of the same 10
inputs, in a temporary folder, with no namespace, limit, uid or cleanup; its results are parsed
and checked the same way. Both are timed from the call to the parsed results, interleaved, and
the ratio of the medians is the figure (target <= 2, issue 37).

    flock /tmp/mars-bench.lock .venv/bin/python bench/sandbox_tests.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import DryRun, add_dry_run, report, run_dry  # noqa: E402
from harness.sandbox import SandboxLimits, TestCase, run_tests, sandbox_python  # noqa: E402
from harness.sandbox import batch as batch_module  # noqa: E402
from harness.sandbox import batch_child as wire  # noqa: E402
from harness.sandbox.pipes import stdin_chunks  # noqa: E402

# A typical contest program: read a list, answer with a few lines.
PROGRAM = """
import sys
data = sys.stdin.read().split()
n = int(data[0])
values = sorted(map(int, data[1 : n + 1]))
print(sum(values))
print(*values[:3])
"""
PER_TEST_SECONDS = 4.0
LIMITS = SandboxLimits(wall_seconds=60)


def make_tests(count: int = 10) -> list[TestCase]:
    tests = []
    for case in range(count):
        values = [(case * 37 + k * 11) % 101 for k in range(50 + case)]
        stdin = f"{len(values)}\n{' '.join(map(str, values))}\n"
        ordered = sorted(values)
        tests.append(TestCase(stdin, f"{sum(values)}\n{' '.join(map(str, ordered[:3]))}\n"))
    return tests


def bare_runner_command() -> list[str]:
    source = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'harness' / 'sandbox')!r}); "
        "import batch_child; batch_child.serve()"
    )
    return [sandbox_python(), "-I", "-c", source]


def bare_stream(tests: list[TestCase]) -> bytes:
    """The batch runner's framed input of `tests`, as the sandbox writes it."""
    return b"".join(
        b"".join(
            wire.case_frames(
                index,
                PER_TEST_SECONDS,
                4,
                batch_module.case_output_cap(LIMITS, tests),
                stdin_chunks(test.stdin),
            )
        )
        for index, test in enumerate(tests)
    )


def run_bare(tests: list[TestCase], folder: Path) -> int:
    """The same batch, uncontained: the number of tests passed."""
    stream = bare_stream(tests)
    done = subprocess.run(bare_runner_command(), input=stream, capture_output=True, cwd=folder)
    results = batch_module._Results(tests, LIMITS, 4)
    results(done.stdout)
    return sum(outcome.passed for outcome in results.outcomes)


def run_sandboxed(tests: list[TestCase]) -> int:
    result = run_tests(PROGRAM, tests, LIMITS, per_test_seconds=PER_TEST_SECONDS)
    if not result.ok:
        raise SystemExit(f"the sandboxed batch failed: {result.reason} {result.stderr_tail}")
    return result.passed


def timed(function, *args) -> tuple[float, int]:
    started = time.perf_counter()
    passed = function(*args)
    return time.perf_counter() - started, passed


def dry_run(dry: DryRun) -> None:
    """The program compiles; the tests and their framed stream are built; the interpreter the
    sandbox runs and the bare runner's command line (its batch runner file) are found."""
    from core.errors import MarsError

    compile(PROGRAM, "program", "exec")
    tests = make_tests()
    bare_stream(tests)
    dry.count("test", len(tests))
    try:
        command = bare_runner_command()
    except RuntimeError as exc:  # no interpreter the sandbox user can run
        raise MarsError(str(exc)) from None
    if not (ROOT / "harness" / "sandbox" / "batch_child.py").is_file():
        raise MarsError("no harness/sandbox/batch_child.py: the bare runner runs it")
    dry.program(command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    tests = make_tests()
    with tempfile.TemporaryDirectory(prefix="mars-bench-bare-") as folder:
        (Path(folder) / "main.py").write_text(PROGRAM)
        for _ in range(2):  # warm: bytecode written, caches filled
            run_bare(tests, Path(folder))
            run_sandboxed(tests)
        sandboxed, bare = [], []
        for _ in range(args.repeats):
            seconds, passed = timed(run_sandboxed, tests)
            assert passed == len(tests), passed
            sandboxed.append(seconds)
            seconds, passed = timed(run_bare, tests, Path(folder))
            assert passed == len(tests), passed
            bare.append(seconds)
    ratio = statistics.median(sandboxed) / statistics.median(bare)
    report(
        "sandbox_10_tests_over_bare_python",
        ratio,
        2.0,
        sandboxed_ms=round(statistics.median(sandboxed) * 1000, 1),
        bare_ms=round(statistics.median(bare) * 1000, 1),
        tests=len(tests),
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
