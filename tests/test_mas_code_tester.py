"""The coder + tester workflow over HTTP against a scripted server on 127.0.0.1, programs and tests
in the sandbox; the rewards per role (coder: ground-truth pass ratio; tester: validity of its
tests and whether they catch a wrong program) read from the transcript."""

from __future__ import annotations

import asyncio
from typing import Any

from mas_testkit import close, models_for

from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, get_mas
from mas.code_tester import parse_tests
from train_backend.mas.rewards import code_tester_rewards, main_line_figures, succeeded

STATEMENT = "Read two integers a and b and print a + b."
RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
GROUND_TRUTH = [
    {"stdin": "1 2\n", "expected": "3\n"},
    {"stdin": "5 0\n", "expected": "5\n"},  # a - b passes this one
    {"stdin": "-4 9\n", "expected": "5\n"},
]
TRAIN_TASK = Task(
    prompt=STATEMENT, kind="code", metadata={"tests": GROUND_TRUTH, "solution": RIGHT}
)


def _tests(*pairs: tuple[str, str]) -> str:
    return "\n".join(
        f"**Test Input:**\n```\n{given}\n```\n**Test Output:**\n```\n{wanted}\n```"
        for given, wanted in pairs
    )


def _run(script: Any, task: Task, config: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, coder="c", tester="t")

        async def go() -> Any:
            try:
                return await get_mas("code_tester")(task, models, config)
            finally:
                await close(models)

        transcript = asyncio.run(go())
        return transcript, [seen.body for seen in server.seen]


def test_parse_tests_reads_every_input_output_pair() -> None:
    found = parse_tests("intro\n" + _tests(("1 2", "3"), ("0 0", "0")) + "\nthat's all")
    assert [(t.stdin, t.expected) for t in found] == [("1 2\n", "3\n"), ("0 0\n", "0\n")]


def test_mismatches_reach_both_agents_and_passing_tests_end_the_episode() -> None:
    coder_programs = iter([WRONG, RIGHT])
    prompts: dict[str, list[str]] = {"c": [], "t": []}

    def script(request: dict[str, Any]) -> Reply:
        prompts[request["model"]].append(request["messages"][-1]["content"])
        if request["model"] == "c":
            return Reply(text=f"```python\n{next(coder_programs)}```")
        # One valid test that catches a - b, one valid test it passes, one invalid test.
        return Reply(text=_tests(("2 3", "5"), ("7 0", "7"), ("1 1", "3")))

    transcript, asked = _run(script, TRAIN_TASK, {"max_turns": 2})
    assert [body["model"] for body in asked] == ["c", "t", "c", "t"]
    first, second = transcript.extra["rounds"]
    assert first["on_tests"]["passed"] == [False, True, False]
    assert "expected: '5\\n' got: '-1\\n'" in prompts["c"][1]  # the coder sees the mismatch
    assert "failed 2 of 3 tests" in prompts["t"][1]
    assert first["reference_on_tests"]["passed"] == [True, True, False]
    # The right program still fails the tester's invalid test: the rounds run out.
    assert second["on_tests"]["passed"] == [True, True, False]
    assert transcript.stop_reason == "turn_limit"
    rewards = code_tester_rewards(transcript, "", TRAIN_TASK)
    assert rewards[("coder", 0)] == 1 / 3 and rewards[("coder", 1)] == 1.0
    # Two of three tests valid, and a valid one caught the wrong program: 2/3 + 1.
    assert rewards[("tester", 0)] == 2 / 3 + 1.0
    assert rewards[("tester", 1)] == 2 / 3  # nothing left to catch
    assert transcript.final_answer.startswith("```python\n") and "a + b" in transcript.final_answer
    # What a training step reports of its main lines: the last program's ground-truth pass ratio
    # and the mean validity of the tester's tests.
    figures = main_line_figures(transcript.model_dump(mode="json"))
    assert figures == {"code/pass_ratio": 1.0, "code/test_validity": 2 / 3}


def test_an_evaluation_task_runs_no_ground_truth_and_all_passing_tests_stop_early() -> None:
    def script(request: dict[str, Any]) -> Reply:
        if request["model"] == "c":
            return Reply(text=f"```python\n{RIGHT}```")
        return Reply(text=_tests(("2 3", "5")))

    task = Task(prompt=STATEMENT, kind="code")
    transcript, asked = _run(script, task, {"max_turns": 3})
    assert len(asked) == 2 and transcript.stop_reason == "tests_pass"
    (only,) = transcript.extra["rounds"]
    assert only["ground_truth"] is None and only["reference_on_tests"] is None
    assert code_tester_rewards(transcript, "", task) == {("coder", 0): 0.0, ("tester", 0): 0.0}


def test_no_program_or_no_tests_score_nothing_and_success_needs_every_ground_truth_test() -> None:
    def script(request: dict[str, Any]) -> Reply:
        return Reply(text="I cannot.")

    transcript, _ = _run(script, TRAIN_TASK, {"max_turns": 1})
    assert code_tester_rewards(transcript, "", TRAIN_TASK) == {
        ("coder", 0): 0.0,
        ("tester", 0): 0.0,
    }
    assert not succeeded(transcript, "", TRAIN_TASK)


def test_the_coder_alone_writes_one_program_scored_on_the_ground_truth() -> None:
    def script(request: dict[str, Any]) -> Reply:
        return Reply(text=f"```python\n{WRONG}```")

    with ScriptedServer(script) as server:
        models = models_for(server.base_url, coder="c")

        async def go() -> Any:
            try:
                return await get_mas("code_single")(TRAIN_TASK, models, {"train_tests": 0})
            finally:
                await close(models)

        transcript = asyncio.run(go())
        asked = [seen.body["model"] for seen in server.seen]
    assert asked == ["c"] and transcript.stop_reason == "answered"
    assert code_tester_rewards(transcript, "", TRAIN_TASK) == {("coder", 0): 1 / 3}
    assert not succeeded(transcript, "", TRAIN_TASK)
