"""`code_tester`: a coder writes a stdin/stdout program, a tester writes tests (Stronger-MAS code).

`code_single` is the coder alone (one program, no tests): the single-agent baseline.

After Stronger-MAS's code environment (PettingLLMs; docs/mas_training.md), written from its
description.
Each round (up to `max_turns`, default 4), coder first: the coder writes a complete Python program
that reads stdin and writes stdout; the tester writes test cases as `**Test Input:**` /
`**Test Output:**` pairs of fenced blocks; the program runs on the tester's tests in the sandbox
(one start for all of them, `harness.sandbox.run_tests_async`). When it passes every one, the
episode ends; otherwise both see the mismatches (input, expected, actual) next round and refine.
The final answer is the coder's last program, which a code suite grades on its hidden tests.

Training only (a problem whose `task.metadata` has them, never an evaluation task): after each
coder call the program also runs on the ground-truth `tests` (the first `train_tests`, default 4,
as the reference; 0 = all), and after each tester call the reference `solution` runs on the
tester's tests, so the rewards (`train_backend.mas.rewards.code_tester_rewards`) can score the
coder by its ground-truth pass ratio and the tester by its tests' validity and whether they catch a
wrong program. Nothing of either is shown to an agent. Config: `max_turns`, `code_seconds` (wall
clock of one batch of tests, default 20), `test_seconds` (one test case, default 5); a trainer may
pass `tests_runner`, an async (code, tests, limits, test_seconds) -> `TestsResult`.
"""

from __future__ import annotations

import re
from typing import Any

from harness.sandbox import SandboxLimits, TestCase, TestsResult, run_tests_async
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import int_option, seconds_option
from mas.reasoner_tool import code_of

CODER_SYSTEM = (
    "You are a coder. Write one complete Python program that reads the input from stdin and "
    "prints the answer to stdout. Put the program in a ```python code block."
)
TESTER_SYSTEM = (
    "You are a tester. Write test cases for the problem: for each, a line **Test Input:** followed "
    "by a fenced block with the exact stdin, then a line **Test Output:** followed by a fenced "
    "block with the exact expected stdout."
)
# A pair is what this pattern (DOTALL) finds, the input running to the first fence that a Test
# Output header follows:
#   \*\*Test Input:?\*\*:?\s*```[^\n]*\n(.*?)```\s*\*\*Test Output:?\*\*:?\s*```[^\n]*\n(.*?)```
# The pattern itself is quadratic on a reply of inputs without outputs (each input would scan on
# to its end), so `parse_tests` reads the same pairs from the headers' positions, found once.
_INPUT_HEADER = re.compile(r"\*\*Test Input:?\*\*:?\s*```")
_OUTPUT_HEADER = re.compile(r"(?<=```)\s*\*\*Test Output:?\*\*:?\s*```")
MISMATCHES_SHOWN = 3
_SHOWN = 300  # characters of an input or output shown in a mismatch


def parse_tests(reply: str) -> list[TestCase]:
    """Every (input, output) pair of a tester's reply, in order (in time linear in its length)."""
    # (the fence that ends an input, the end of the Test Output header that follows it)
    outputs = [(header.start() - 3, header.end()) for header in _OUTPUT_HEADER.finditer(reply)]
    tests: list[TestCase] = []
    newline = -1  # the last newline found: the positions asked about only grow
    next_output = 0
    position = 0
    while (header := _INPUT_HEADER.search(reply, position)) is not None:
        if newline < header.end():
            newline = reply.find("\n", header.end())
        given = newline + 1  # the input starts on the line after its fence
        while next_output < len(outputs) and outputs[next_output][0] < given:
            next_output += 1
        if newline < 0 or next_output == len(outputs):
            break  # no later input can have an output either
        fence, output_header = outputs[next_output]
        if newline < output_header:
            newline = reply.find("\n", output_header)
        wanted = newline + 1
        close = reply.find("```", wanted) if newline >= 0 else -1
        if close < 0:
            break
        tests.append(TestCase(stdin=reply[given:fence], expected=reply[wanted:close]))
        position = close + 3
    return tests


def mismatch_text(result: TestsResult | None) -> str:
    if result is None:
        return "The program could not be run on the tests (no program or no tests)."
    if not result.ok:
        return f"The tests could not run ({result.reason})."
    failed = [outcome for outcome in result.outcomes if not outcome.passed]
    if not failed:
        return f"The program passed all {len(result.outcomes)} tests."
    lines = [f"The program failed {len(failed)} of {len(result.outcomes)} tests:"]
    for outcome in failed[:MISMATCHES_SHOWN]:
        lines.append(
            f"- input: {outcome.stdin[:_SHOWN]!r} expected: {outcome.expected[:_SHOWN]!r} "
            f"got: {outcome.actual[:_SHOWN]!r}" + (f" ({outcome.reason})" if outcome.reason else "")
        )
    return "\n".join(lines)


def coder_prompt(task: Task, previous: dict[str, Any] | None) -> str:
    if previous is None:
        return task.prompt
    code = previous["code"] or "(no program)"
    return (
        f"{task.prompt}\n\nYour previous program:\n```python\n{code}```\n"
        f"On the tester's tests: {previous['mismatches']}\nWrite a corrected program."
    )


def tester_prompt(task: Task, code: str | None, previous: dict[str, Any] | None) -> str:
    program = code or "(no program)"
    text = f"{task.prompt}\n\nThe coder's program:\n```python\n{program}```\n"
    if previous is not None:
        text += f"Your previous tests gave: {previous['mismatches']}\n"
    return text + "Write test cases that check the program is correct."


def _passes_all(result: TestsResult | None) -> bool:
    return (
        result is not None
        and result.ok
        and bool(result.outcomes)
        and all(outcome.passed for outcome in result.outcomes)
    )


def _summary(result: TestsResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "ok": result.ok,
        "reason": result.reason,
        "passed": [outcome.passed for outcome in result.outcomes],
        "pass_ratio": result.pass_ratio,
    }


def _ground_truth(task: Task, train_tests: int) -> list[TestCase]:
    given = task.metadata.get("tests", [])
    tests = [TestCase(stdin=t["stdin"], expected=t["expected"]) for t in given]
    return tests[:train_tests] if train_tests else tests


@mas("code_tester", kinds=("code",), roles=("coder", "tester"))
async def code_tester(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    return await play_code(task, models, config, with_tester=True)


@mas("code_single", kinds=("code",), roles=("coder",))
async def code_single(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    """The coder alone, one program (the single-agent baseline on the code environment)."""
    return await play_code(task, models, config, with_tester=False)


async def play_code(
    task: Task, models: Models, config: dict[str, Any], *, with_tester: bool
) -> Transcript:
    max_turns = int_option(config, "max_turns", 4) if with_tester else 1
    train_tests = int_option(config, "train_tests", 4, minimum=0)
    limits = SandboxLimits(wall_seconds=seconds_option(config, "code_seconds", 20.0))
    test_seconds = seconds_option(config, "test_seconds", 5.0)
    run_tests = config.get("tests_runner", run_tests_async)

    async def run(code: str | None, tests: list[TestCase]) -> TestsResult | None:
        if code is None or not tests:
            return None
        return await run_tests(code, tests, limits, per_test_seconds=test_seconds)

    ground_truth = _ground_truth(task, train_tests)
    solution = task.metadata.get("solution")
    conversation = Conversation(models, task)
    rounds: list[dict[str, Any]] = []
    code: str | None = None
    passed = False
    for round_number in range(max_turns):
        previous = rounds[-1] if rounds else None
        coder = await conversation.ask(
            "coder", CODER_SYSTEM, coder_prompt(task, previous), round=round_number
        )
        written = code_of(coder.text)
        wrote_code = written is not None
        code = written if written is not None else code  # no new program: the last one stands
        truth = await run(code, ground_truth) if ground_truth else None
        record: dict[str, Any] = {
            "round": round_number,
            "code": code,
            "wrote_code": wrote_code,
            "ground_truth": _summary(truth),
        }
        rounds.append(record)
        if not with_tester:
            break
        tester = await conversation.ask(
            "tester", TESTER_SYSTEM, tester_prompt(task, code, previous), round=round_number
        )
        tests = parse_tests(tester.text)
        on_tests = await run(code, tests)
        validity = await run(solution, tests) if isinstance(solution, str) else None
        record.update(
            tests=[{"stdin": t.stdin, "expected": t.expected} for t in tests],
            on_tests=_summary(on_tests),
            reference_on_tests=_summary(validity),
            mismatches=mismatch_text(on_tests),
        )
        if _passes_all(on_tests):
            passed = True
            break
    transcript = conversation.transcript
    transcript.final_answer = f"```python\n{code}```" if code is not None else ""
    transcript.rounds = len(rounds)
    transcript.ended_early = len(rounds) < max_turns
    transcript.stop_reason = (
        "tests_pass" if passed else ("answered" if not with_tester else "turn_limit")
    )
    transcript.extra = {"rounds": rounds}
    return transcript
