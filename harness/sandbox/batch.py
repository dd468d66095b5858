"""Run one program against many stdin/stdout test cases in one sandbox start.

    from harness.sandbox import TestCase, run_tests
    result = run_tests(code, [TestCase("1 2\\n", "3\\n"), TestCase("5 5\\n", "10\\n")], limits)
    result.ok, result.passed, result.pass_ratio, result.outcomes[1].reason

One sandboxed process starts (every limit of `SandboxLimits` on it, as for `run_python`); inside
it `batch_child.py` compiles the program once and runs it once per case in a forked child with
the case's stdin, a wall clock and a CPU limit of `per_test_seconds`, and an output cap. The
cases' stdin is streamed to it and the results come back as frames, so neither a 100 MB input
nor a flood of output is ever held whole here. Outputs are compared after `normalise_output`.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from harness.sandbox import batch_child as wire
from harness.sandbox.limits import Isolation, SandboxLimits, SandboxResult
from harness.sandbox.pipes import Output, stdin_chunks
from harness.sandbox.reasons import classify
from harness.sandbox.runner import _Run, drive, drive_async

DEFAULT_PER_TEST_SECONDS = 4.0
STDIN_DISPLAY_CHARS = 4096  # how much of a case's stdin an outcome keeps, for showing
HARNESS_STDERR_BYTES = 64 * 1024  # room for the batch runner's own stderr in the stream budget


@dataclass(frozen=True)
class TestCase:
    """One test: the program's whole stdin and the stdout it must print."""

    __test__ = False  # not a pytest class
    stdin: str | bytes
    expected: str


@dataclass(frozen=True)
class TestOutcome:
    """How one case went. `reason`: None when passed; "wrong" (clean exit, other output), or
    why the run failed: "timeout", "cpu", "output", "memory", "error", ... (`REASONS`)."""

    __test__ = False
    passed: bool
    reason: str | None
    actual: str  # the program's stdout, cut at the run's output limit
    expected: str
    stdin: str  # the first STDIN_DISPLAY_CHARS characters of the case's stdin
    stderr_tail: str = ""
    actual_truncated: bool = False
    exit_code: int | None = None
    signal: int | None = None
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class TestsResult:
    """A batch. `ok`: the batch itself ran to the end (whatever the program did in each case);
    otherwise `reason` says why it stopped (a sandbox reason word) and the cases it did not
    finish have that reason too. `outcomes` has one entry per test, in order."""

    __test__ = False
    ok: bool
    reason: str | None
    outcomes: list[TestOutcome]
    wall_seconds: float
    stderr_tail: str = ""  # the batch runner's own stderr (empty when all is well)
    isolation: Isolation = field(default_factory=Isolation)

    @property
    def passed(self) -> int:
        return sum(outcome.passed for outcome in self.outcomes)

    @property
    def pass_ratio(self) -> float:
        return self.passed / len(self.outcomes) if self.outcomes else 0.0


def normalise_output(text: str) -> str:
    """Line ends unified (\\r\\n and \\r become \\n), trailing whitespace cut from every line,
    trailing empty lines dropped; nothing else changes."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def outputs_match(actual: str, expected: str) -> bool:
    return normalise_output(actual) == normalise_output(expected)


def case_output_cap(limits: SandboxLimits, tests: Sequence[TestCase]) -> int:
    """stdout + stderr one case may write: the output limit, plus room for the longest expected
    output of the batch twice over (so a long right answer with padding still fits), rounded up
    to a power of two. One cap for every case, and a coarse one: the cap is sent into the
    sandbox, and a cap per case would tell the program the length of the answer it must print
    (enough to tell "YES" from "NO")."""
    longest = max((len(test.expected) for test in tests), default=0)
    return 1 << (limits.output_bytes + 2 * longest - 1).bit_length()


def _display(stdin: str | bytes) -> str:
    shown = stdin[:STDIN_DISPLAY_CHARS]
    return shown.decode("utf-8", "replace") if isinstance(shown, bytes) else shown


class _Results:
    """Parses the result frames as they arrive (one frame held at a time) into outcomes."""

    def __init__(self, tests: Sequence[TestCase], limits: SandboxLimits, cpu_limit: int) -> None:
        self.tests, self.limits, self.cpu_limit = tests, limits, cpu_limit
        self.buffer = bytearray()
        self.outcomes: list[TestOutcome] = []
        self.broken = False

    def __call__(self, data: bytes) -> None:
        if self.broken:
            return
        self.buffer += data
        try:
            while self._take_one():
                pass
        except (ValueError, IndexError, UnicodeError):  # struct.error is a ValueError
            self.broken = True

    def _take_one(self) -> bool:
        if len(self.buffer) < wire.FRAME.size:
            return False
        kind, size = wire.FRAME.unpack_from(self.buffer)
        if kind != wire.RESULT_FRAME or size < wire.RESULT.size:
            raise ValueError("not a result frame")
        end = wire.FRAME.size + size
        if len(self.buffer) < end:
            return False
        payload = bytes(self.buffer[wire.FRAME.size : end])
        del self.buffer[:end]
        fields = wire.RESULT.unpack_from(payload)
        index, exit_code, signal_number, stopped, cpu, wall, truncated, out_len, err_len = fields
        body = memoryview(payload)[wire.RESULT.size :]
        if index != len(self.outcomes) or out_len + err_len != len(body):
            raise ValueError("result frame out of order or malformed")
        stdout = str(body[:out_len], "utf-8", "replace")
        stderr = str(body[out_len:], "utf-8", "replace")
        self.outcomes.append(
            self._outcome(
                index, exit_code, signal_number, stopped, cpu, wall, truncated, stdout, stderr
            )
        )
        return True

    def _outcome(
        self,
        index: int,
        exit_code: int,
        signal_number: int,
        stopped: int,
        cpu: float,
        wall: float,
        truncated: bool,
        stdout: str,
        stderr: str,
    ) -> TestOutcome:
        test = self.tests[index]
        stopped_for = wire.STOPPED_FOR[stopped]
        if stopped_for is None and signal_number == signal.SIGKILL and cpu >= self.cpu_limit:
            stopped_for = "cpu"  # the hard CPU limit, reached by code that ignored SIGXCPU
        returncode = -signal_number if signal_number else exit_code
        reason = classify(stopped_for, returncode, stderr, ready=True)
        passed = reason is None and outputs_match(stdout, test.expected)
        if reason is None and not passed:
            reason = "wrong"
        shown_limit = self.limits.output_bytes
        return TestOutcome(
            passed=passed,
            reason=reason,
            actual=stdout[:shown_limit],
            expected=test.expected,
            stdin=_display(test.stdin),
            stderr_tail=stderr,
            actual_truncated=bool(truncated) or len(stdout) > shown_limit,
            exit_code=None if signal_number else exit_code,
            signal=signal_number or None,
            wall_seconds=wall,
            cpu_seconds=cpu,
        )


@dataclass
class _Batch:
    run: _Run
    results: _Results


def _start(
    code: str,
    tests: Sequence[TestCase],
    limits: SandboxLimits,
    per_test_seconds: float,
    namespaces: bool,
) -> _Batch:
    if per_test_seconds <= 0:
        raise ValueError("per_test_seconds must be positive")
    cpu_limit = max(1, math.ceil(per_test_seconds))
    caps = [case_output_cap(limits, tests)] * len(tests)

    def stream() -> Iterator[bytes]:
        for index, (test, cap) in enumerate(zip(tests, caps, strict=True)):
            chunks = stdin_chunks(test.stdin)
            yield from wire.case_frames(index, per_test_seconds, cpu_limit, cap, chunks)

    results = _Results(tests, limits, cpu_limit)
    per_result = wire.FRAME.size + wire.RESULT.size + limits.stderr_tail_bytes
    budget = sum(caps) + len(tests) * per_result + HARNESS_STDERR_BYTES
    output = Output(limits, limit=budget, stdout_sink=results)
    run = _Run(code, limits, namespaces, stdin=stream(), tests=True, output=output)
    return _Batch(run, results)


def _collect(batch: _Batch, tests: Sequence[TestCase], result: SandboxResult) -> TestsResult:
    outcomes = list(batch.results.outcomes)
    # Every result came back: the batch ran, whatever happened to the runner afterwards.
    complete = len(outcomes) == len(tests) and not batch.results.broken
    reason = None if complete else result.reason or "error"  # "error": ended, saying nothing
    for test in tests[len(outcomes) :]:
        outcomes.append(
            TestOutcome(
                passed=False,
                reason=reason,
                actual="",
                expected=test.expected,
                stdin=_display(test.stdin),
            )
        )
    return TestsResult(
        ok=complete,
        reason=reason,
        outcomes=outcomes,
        wall_seconds=result.wall_seconds,
        stderr_tail=result.stderr_tail,
        isolation=result.isolation,
    )


def _no_tests() -> TestsResult:
    return TestsResult(ok=True, reason=None, outcomes=[], wall_seconds=0.0)


def run_tests(
    code: str,
    tests: Sequence[TestCase],
    limits: SandboxLimits | None = None,
    *,
    per_test_seconds: float = DEFAULT_PER_TEST_SECONDS,
    namespaces: bool = True,
) -> TestsResult:
    """Run `code` once per test case in one sandbox start and compare each stdout with the
    case's expected output (blocking). The batch as a whole is bound by `limits` (its wall
    clock included: give it room for every case); each case by `per_test_seconds` of wall
    clock and as many whole CPU seconds (rounded up)."""
    if not tests:
        return _no_tests()
    limits = limits or SandboxLimits()
    batch = _start(code, tests, limits, per_test_seconds, namespaces)
    return _collect(batch, tests, drive(batch.run))


async def run_tests_async(
    code: str,
    tests: Sequence[TestCase],
    limits: SandboxLimits | None = None,
    *,
    per_test_seconds: float = DEFAULT_PER_TEST_SECONDS,
    namespaces: bool = True,
) -> TestsResult:
    """`run_tests` on the running event loop (many batches can be in flight at once)."""
    if not tests:
        return _no_tests()
    limits = limits or SandboxLimits()
    batch = _start(code, tests, limits, per_test_seconds, namespaces)
    return _collect(batch, tests, await drive_async(batch.run))


__all__ = [
    "DEFAULT_PER_TEST_SECONDS",
    "TestCase",
    "TestOutcome",
    "TestsResult",
    "normalise_output",
    "outputs_match",
    "run_tests",
    "run_tests_async",
]
