"""Run model-written Python in a contained child process (see docs/sandbox.md).

    from harness.sandbox import SandboxLimits, run_python
    result = run_python("print(2 + 2)", SandboxLimits(wall_seconds=5))
    result.ok, result.stdout, result.reason   # True, "4\n", None

A run is a separate process with CPU, memory, output, process, file and wall-clock limits, no
network, no inherited environment, its own unprivileged uid (as root) and a fresh working folder
that is removed afterwards; it and everything it started are killed at the end. `reason` names
what stopped a failed run (`REASONS`). `run_python(code, limits, stdin=...)` feeds its stdin;
`run_tests(code, [TestCase(stdin, expected), ...], limits)` runs the program once per test case
in a single sandbox start and compares the outputs (`TestsResult`).
"""

from harness.sandbox.batch import (
    TestCase,
    TestOutcome,
    TestsResult,
    normalise_output,
    outputs_match,
    run_tests,
    run_tests_async,
)
from harness.sandbox.limits import REASONS, Isolation, SandboxLimits, SandboxResult
from harness.sandbox.runner import run_python, run_python_async, sandbox_python

__all__ = [
    "REASONS",
    "Isolation",
    "SandboxLimits",
    "SandboxResult",
    "TestCase",
    "TestOutcome",
    "TestsResult",
    "normalise_output",
    "outputs_match",
    "run_python",
    "run_python_async",
    "run_tests",
    "run_tests_async",
    "sandbox_python",
]
