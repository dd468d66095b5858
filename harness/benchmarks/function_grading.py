"""Function-call tests (HumanEval) graded outside the graded program.

The verdict is never decided in the process that runs the candidate, since nothing in that
process can be trusted once model-written code has run there (a value equal to anything, a
forged success line, a patched or skipped test, a trace hook, an early exit all win an
in-process check). Instead, three steps:

1. **Record** (once per problem and machine, in the sandbox): the benchmark's own `check` runs
   on the canonical solution wrapped in a recorder that notes every call's arguments, with
   `random` seeded, so the checks that draw random inputs draw the same ones each time.
2. **Call** (in the sandbox, per graded answer): the program is the prompt, the completion and
   `function_child.py`; it calls the entry point on the recorded inputs and prints the results
   as plain data (see function_child.py). The expected values and the test are never in it.
3. **Replay** (here, in trusted code): the benchmark's `check` runs again, seeded the same, on a
   stand-in candidate that returns the program's results call by call (and fails when the
   check asks for arguments other than the recorded ones). The check's own asserts decide, so
   the benchmark's equality holds as written (`2 == 2.0`, its float tolerances, checks of a
   property such as "a zero of this polynomial"). A result that is not plain data, an
   exception, a missing or malformed results line, or a run that did not exit cleanly fails.

The recorded calls are kept in memory and in the MARS cache (`function_calls/`), keyed by a hash
of the problem set and of function_child.py.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import hashlib
import json
import os
import random
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.files import mars_cache_dir
from harness.benchmarks.function_child import _mars_decode
from harness.sandbox import SandboxLimits, run_python_async

CHILD_SOURCE = Path(__file__).with_name("function_child.py").read_text(encoding="utf-8")
SEED = 1234
RECORD_LIMITS = SandboxLimits(
    cpu_seconds=120, wall_seconds=120, memory_bytes=1 << 30, output_bytes=64 << 20
)
RESULT_LINE_BYTES = 16 << 20  # the results line of one graded answer, at most


@dataclass(frozen=True)
class FunctionProblem:
    """One problem: `prompt` (its stub and helpers), the canonical `solution` (a body that
    continues the prompt), its `test` (defining `check(candidate)`) and `entry_point`."""

    id: str
    prompt: str
    solution: str
    test: str
    entry_point: str


class RecordingError(MarsError):
    """The canonical solution's calls could not be recorded."""


def _cache_dir() -> Path | None:
    try:
        folder = mars_cache_dir() / "function_calls"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    except OSError:
        return None


def _problem_set_key(problems: list[FunctionProblem]) -> str:
    digest = hashlib.sha256(CHILD_SOURCE.encode())
    digest.update(str(SEED).encode())
    for problem in problems:
        for text in (problem.id, problem.prompt, problem.solution, problem.test):
            digest.update(hashlib.sha256(text.encode()).digest())
        digest.update(problem.entry_point.encode())
    return digest.hexdigest()[:24]


def _recording_program(problems: list[FunctionProblem]) -> tuple[str, str]:
    rows = [
        {
            "id": problem.id,
            "source": f"{problem.prompt}{problem.solution}\n\n{problem.test}\n",
            "entry_point": problem.entry_point,
            "seed": SEED,
        }
        for problem in problems
    ]
    program = CHILD_SOURCE + "\n_mars_record(_mars_sys.stdin.read())\n"
    return program, json.dumps(rows)


class CallRecorder:
    """The recorded calls of a problem set, made once (one sandbox run for all problems)."""

    def __init__(self) -> None:
        self._recorded: dict[str, dict[str, list[Any]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def calls(self, problems: list[FunctionProblem]) -> dict[str, list[Any]]:
        """Problem id -> its recorded calls (JSON-ready); RecordingError for a problem set
        whose canonical solutions do not pass their own checks."""
        key = _problem_set_key(problems)
        if key in self._recorded:
            return self._recorded[key]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._recorded:
                self._recorded[key] = await asyncio.to_thread(_read_cached, key) or (
                    await self._record(key, problems)
                )
        return self._recorded[key]

    async def _record(self, key: str, problems: list[FunctionProblem]) -> dict[str, list[Any]]:
        program, stdin = _recording_program(problems)
        result = await run_python_async(program, RECORD_LIMITS, stdin=stdin)
        recorded: dict[str, list[Any]] = {}
        failed: dict[str, str] = {}
        for line in result.stdout.splitlines():
            if not line.strip():
                continue
            reply = json.loads(line)
            if "calls" in reply:
                recorded[reply["id"]] = reply["calls"]
            else:
                failed[reply["id"]] = reply.get("error", "unknown")
        missing = [p.id for p in problems if p.id not in recorded and p.id not in failed]
        if missing or not result.ok:
            raise RecordingError(
                f"recording the canonical solutions' calls stopped ({result.reason}) before "
                f"{len(missing)} problem(s), e.g. {missing[:3]}: {result.stderr_tail[-300:]}"
            )
        _write_cached(key, {"calls": recorded, "failed": failed})
        return recorded


def _read_cached(key: str) -> dict[str, list[Any]] | None:
    folder = _cache_dir()
    path = folder / f"{key}.json" if folder else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))["calls"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached(key: str, content: dict[str, Any]) -> None:
    folder = _cache_dir()
    if folder is None:
        return
    temporary = folder / f".{key}.{os.getpid()}.tmp"
    try:
        temporary.write_text(json.dumps(content), encoding="utf-8")
        os.replace(temporary, folder / f"{key}.json")
    except OSError:
        temporary.unlink(missing_ok=True)


def calling_program(problem: FunctionProblem, completion: str) -> str:
    """The prompt, the completion (a whole function overrides the prompt's stub; a bare body
    continues it), function_child.py and the call of the entry point on stdin's inputs."""
    return (
        f"{problem.prompt}\n{completion}\n\n{CHILD_SOURCE}\n_mars_call({problem.entry_point!r})\n"
    )


class _Failed(BaseException):
    """The candidate's call raised, or returned something that is not plain data. A
    BaseException, so that a check that swallows `Exception` around a call cannot pass it."""


class _Mismatch(BaseException):
    """The check asked for a call that was not recorded (its inputs depend on the candidate);
    a BaseException for the same reason."""


def parse_outcomes(stdout: str, expected_calls: int) -> list[Any] | None:
    """The results line (the last line of stdout), decoded: one entry per call, a value or
    `_FAILED`; None when there is no well-formed line with exactly that many results."""
    end = len(stdout.rstrip("\n"))
    start = stdout.rfind("\n", 0, end) + 1
    line = stdout[start:end]
    if not line or len(line) > RESULT_LINE_BYTES:
        return None
    try:
        document = json.loads(line)
        entries = document["outcomes"]
        if type(entries) is not list or len(entries) != expected_calls:
            return None
        return [_decode_outcome(entry) for entry in entries]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


_FAILED = object()


def _decode_outcome(entry: Any) -> Any:
    if type(entry) is not dict or len(entry) != 1:
        raise ValueError("not an outcome")
    ((tag, body),) = entry.items()
    if tag == "v":
        return _mars_decode(body)
    if tag in ("e", "x"):
        return _FAILED
    raise ValueError("not an outcome")


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> types.CodeType:
    return compile(source, "<benchmark test>", "exec")


def _seeded_random_module(seed: int) -> types.ModuleType:
    """A private `random` module: the real one's names, its module-level functions bound to a
    generator of its own seeded with `seed` (the recording seeded the real one the same way),
    so the replay draws what the recording drew and touches no one else's random state."""
    private = types.ModuleType("random")
    private.__dict__.update(random.__dict__)
    generator = random.Random(seed)
    for name, value in random.__dict__.items():
        if getattr(value, "__self__", None) is random._inst:
            setattr(private, name, getattr(generator, name))
    return private


def _replay_builtins(private_random: types.ModuleType) -> dict[str, Any]:
    table = dict(builtins.__dict__)
    real_import = builtins.__import__

    def importer(name: str, *args: Any, **kwargs: Any) -> Any:
        return private_random if name == "random" else real_import(name, *args, **kwargs)

    table["__import__"] = importer
    return table


def replay_check(problem: FunctionProblem, calls: list[Any], outcomes: list[Any]) -> bool:
    """The benchmark's check on a stand-in that answers with `outcomes`: True when it passes."""
    recorded = [_mars_decode(call) for call in calls]
    answered = iter(range(len(recorded)))

    def candidate(*args: Any) -> Any:
        index = next(answered, None)
        if index is None or list(args) != recorded[index]:
            raise _Mismatch
        if outcomes[index] is _FAILED:
            raise _Failed
        return outcomes[index]

    namespace: dict[str, Any] = {
        "__name__": "__mars_replay__",
        "__builtins__": _replay_builtins(_seeded_random_module(SEED)),
    }
    try:
        exec(_compiled(problem.prompt), namespace)  # the benchmark's own code, not the model's
        exec(_compiled(problem.test), namespace)
        namespace[problem.entry_point] = candidate  # as the benchmark has it: the test may
        check: Callable[[Any], Any] = namespace["check"]  # call it by its own name
        check(candidate)
    except (Exception, _Failed, _Mismatch):  # an assert, or what the check raises on these values
        return False
    return True


_recorder = CallRecorder()


async def grade_function(
    problem: FunctionProblem,
    problems: list[FunctionProblem],
    completion: str,
    limits: SandboxLimits,
) -> tuple[bool, str | None]:
    """(passed, failure reason) of `completion` on `problem`'s recorded calls; `problems` is
    the set it was recorded with."""
    calls = (await _recorder.calls(problems)).get(problem.id)
    if calls is None:
        raise RecordingError(f"{problem.id}: its canonical solution fails its own check")
    stdin = json.dumps(calls) + "\n"
    result = await run_python_async(calling_program(problem, completion), limits, stdin=stdin)
    if not result.ok:
        return False, result.reason or "error"
    outcomes = parse_outcomes(result.stdout, len(calls))
    if outcomes is None:
        return False, "no_results"
    if any(outcome is _FAILED for outcome in outcomes):
        return False, "raised_or_not_plain"
    passed = await asyncio.to_thread(replay_check, problem, calls, outcomes)
    return passed, None if passed else "wrong"
