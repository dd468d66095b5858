"""The planning workflow (tool agent + plan agent on a puzzle) and its single-agent baseline, over
HTTP against a scripted server on 127.0.0.1, the tool agent's programs in the sandbox; the
rewards per role read from the transcript, and the final answer graded by the puzzle suite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mas_testkit import close, models_for

from core.errors import MarsError
from harness.benchmarks import get_suite
from harness.puzzles import format_actions, make_level, new_state
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Task, check_options, get_mas
from train_backend.mas.rewards import plan_tool_rewards, succeeded
from train_backend.pretrain.plan_start import RIGHT_PROGRAM, WRONG_PROGRAM, printed_moves

LEVEL = make_level("plan_path", "eval", 0, size=4)
SOLUTION = format_actions("plan_path", list(LEVEL.solution))
TASK = Task(prompt="", kind="puzzle", metadata={"environment": LEVEL.ref})


def _run(
    workflow: str, script: Any, config: dict[str, Any], task: Task = TASK
) -> tuple[Any, list[dict[str, Any]]]:
    with ScriptedServer(script) as server:
        models = models_for(server.base_url, tool="coder", plan="planner")

        async def go() -> Any:
            try:
                return await get_mas(workflow)(task, models, config)
            finally:
                await close(models)

        transcript = asyncio.run(go())
        return transcript, [seen.body for seen in server.seen]


def _list_reward(moves: list[str]) -> float:
    return new_state(LEVEL).apply(moves).reward


def test_the_program_reads_the_state_and_a_solving_list_ends_the_episode() -> None:
    # The planning miniature's search program: it reads the current state on stdin.
    def script(request: dict[str, Any]) -> Reply:
        content = request["messages"][-1]["content"]
        if request["model"] == "coder":
            assert "Current position P: (2, 2)" in content
            return Reply(text=f"```python\n{RIGHT_PROGRAM}```")
        assert f"Printed (ok):\nActions: {SOLUTION}" in content
        assert "tried on a copy: 2 moves applied, 0 invalid" in content and "solves the" in content
        return Reply(text=f"Following the program.\n#### {SOLUTION}")

    transcript, asked = _run("plan_tool", script, {"max_turns": 4, "code_seconds": 5})
    assert [body["model"] for body in asked] == ["coder", "planner"]
    assert transcript.stop_reason == "solved" and transcript.extra["solved"]
    solved_reward = _list_reward(list(LEVEL.solution))
    assert plan_tool_rewards(transcript, LEVEL.ref, TASK) == {
        ("plan", 0): pytest.approx(solved_reward),
        ("tool", 0): pytest.approx(2 * solved_reward),  # its own list + the plan agent's
    }
    verdict = get_suite("plan_path").grade(transcript.final_answer, LEVEL.ref)
    assert verdict.correct and succeeded(transcript, LEVEL.ref, TASK)


def test_rounds_go_on_from_the_current_state_and_failures_get_the_reference_penalties() -> None:
    first, rest = LEVEL.solution[0], list(LEVEL.solution[1:])
    rest_list = format_actions("plan_path", rest)
    plan_replies = iter([f"#### [{first}]", "no list at all", f"#### {rest_list}"])
    programs = ["no code", "```python\nraise SystemExit(3)\n```", "```python\nprint(1)\n```"]
    tool_programs = iter(programs)
    plan_prompts: list[str] = []

    def script(request: dict[str, Any]) -> Reply:
        if request["model"] == "coder":
            return Reply(text=next(tool_programs))
        plan_prompts.append(request["messages"][-1]["content"])
        return Reply(text=next(plan_replies))

    transcript, _ = _run("plan_tool", script, {"max_turns": 4, "code_seconds": 5})
    rounds = transcript.extra["rounds"]
    assert [r["execution"] for r in rounds] == ["no_code", "error", "ok"]
    assert "moves taken so far: 0" in plan_prompts[0] and "moves taken so far: 1" in plan_prompts[1]
    assert "Current position P: (1, 2)" in plan_prompts[1]  # the current position, not the start
    rewards = plan_tool_rewards(transcript, LEVEL.ref, TASK)
    first_reward = _list_reward([first])
    assert rewards[("plan", 1)] == -2.0 and rewards[("tool", 1)] == -2.0  # no lists at all
    assert rewards[("tool", 0)] == pytest.approx(-2.0 + first_reward)
    assert rewards[("tool", 2)] == pytest.approx(-2.0 + rewards[("plan", 2)])  # printed no list
    assert (
        transcript.extra["solved"]
        and get_suite("plan_path").grade(transcript.final_answer, LEVEL.ref).correct
    )


def test_reference_rewards_count_the_plan_agents_list_twice() -> None:
    def script(request: dict[str, Any]) -> Reply:
        return Reply(text=f"#### {SOLUTION}")

    default, _ = _run("plan_single", script, {"max_turns": 2})
    doubled, _ = _run("plan_single", script, {"max_turns": 2, "rewards": "reference"})
    once = plan_tool_rewards(default, LEVEL.ref, TASK)
    assert once == {("plan", 0): pytest.approx(_list_reward(list(LEVEL.solution)))}
    assert plan_tool_rewards(doubled, LEVEL.ref, TASK) == {("plan", 0): 2 * once[("plan", 0)]}


def test_a_wrong_final_list_is_not_solved_and_the_step_limit_of_rounds_holds() -> None:
    def script(request: dict[str, Any]) -> Reply:
        return Reply(text="#### [L]")  # (2, 1) is blocked: an invalid move every time

    transcript, asked = _run("plan_single", script, {"max_turns": 3})
    assert len(asked) == 3 and transcript.stop_reason == "turn_limit"
    assert not transcript.extra["solved"] and not succeeded(transcript, LEVEL.ref, TASK)
    assert not get_suite("plan_path").grade(transcript.final_answer, LEVEL.ref).correct


def test_options_are_checked_on_a_puzzle_and_a_non_puzzle_task_is_refused() -> None:
    with pytest.raises(MarsError, match="has no option 'max_turn'"):
        asyncio.run(check_options(get_mas("plan_tool"), {"max_turn": 2}, name="plan_tool"))
    with pytest.raises(MarsError, match="has no option 'code_seconds'"):
        asyncio.run(check_options(get_mas("plan_single"), {"code_seconds": 2}, name="plan_single"))
    for name in ("plan_tool", "code_tester", "ensemble_judge", "reasoner_tool"):
        with pytest.raises(MarsError, match="'code_seconds' must be a positive number of sec"):
            asyncio.run(check_options(get_mas(name), {"code_seconds": "ten"}, name=name))
    with pytest.raises(MarsError, match="'rewards' must be one of default, reference"):
        asyncio.run(check_options(get_mas("plan_tool"), {"rewards": "x"}, name="plan_tool"))
    with pytest.raises(MarsError, match="needs a puzzle task"):
        _run("plan_tool", lambda request: Reply(text="x"), {}, Task(prompt="What is 1 + 1?"))


def test_the_miniatures_programs_print_what_its_data_says_they_print() -> None:
    from harness.sandbox import run_python

    for index in range(2):
        state = new_state(make_level("plan_path", "train", index, size=5))
        for program, swapped in ((RIGHT_PROGRAM, False), (WRONG_PROGRAM, True)):
            result = run_python(program, stdin=state.observation())
            assert result.ok, result.stderr_tail
            printed = result.stdout.strip()
            moves = printed_moves(state.observation(), swapped=swapped)
            assert printed == f"Actions: {format_actions('plan_path', moves)}"
            assert state.copy().apply(moves).solved is not swapped or not moves


def test_the_start_models_stages_teach_copying_then_each_role_at_its_rates() -> None:
    import re

    from train_backend.pretrain.plan_start import TAIL_FROM, PlanPretrainSettings, plan_examples

    settings = PlanPretrainSettings(examples=60, tail_examples=90)

    def printed(example: Any) -> str:  # the list the program printed, as the plan agent sees it
        prompt = example.messages[1]["content"]
        return re.search(r"Printed \(ok\):\nActions: (\[[^\]]*\])", prompt).group(1)

    tails = plan_examples(settings.tails())
    assert {e.kind for e in tails} == {"plan"} and len(tails) == 90  # a level each
    for example in tails:
        prompt = example.messages[1]["content"]
        assert prompt.startswith(TAIL_FROM) and "Tool agent's program" not in prompt
        assert example.reply == f"#### {printed(example)}"  # copy what was printed
    whole = plan_examples(settings.plan_only())
    assert {e.kind for e in whole} == {"plan"} and len(whole) == 60
    assert all(e.reply == f"#### {printed(e)}" for e in whole)
    # later rounds come after lists of different lengths, each told to the tool agent
    tools = [e for e in plan_examples(settings) if e.kind == "tool"]
    told = [re.search(r"plan agent answered (\[[^\]]*\])", e.messages[1]["content"]) for e in tools]
    lengths = {found.group(1).count(",") + 1 for found in told if found is not None}
    assert 0 < sum(found is not None for found in told) < len(tools) and len(lengths) >= 4
    mixed = [e for e in plan_examples(settings) if e.kind == "plan"]
    copied = [e.reply == f"#### {printed(e)}" for e in mixed]
    assert 0.3 < sum(copied) / len(copied) < 0.8  # plan_copies 0.5 (and chance agreements)


def test_a_single_agent_on_a_puzzle_is_scored_by_playing_its_one_list() -> None:
    from mas.base import Transcript
    from train_backend.mas.rewards import single_rewards

    right = Transcript(final_answer=f"Here.\n#### {SOLUTION}")
    wrong, none = Transcript(final_answer="#### [L]"), Transcript(final_answer="no list")
    solved_reward = _list_reward(list(LEVEL.solution))
    assert single_rewards(right, LEVEL.ref, TASK) == {("solver", 0): pytest.approx(solved_reward)}
    assert single_rewards(none, LEVEL.ref, TASK) == {("solver", 0): -2.0}
    assert succeeded(right, LEVEL.ref, TASK) and not succeeded(wrong, LEVEL.ref, TASK)


def _tool_round(task: Task, program: str, plan_reply: str) -> tuple[Any, list[str]]:
    """One round of plan_tool with the tool agent's `program` run in the sandbox; the plan
    agent's prompts."""
    plan_prompts: list[str] = []

    def script(request: dict[str, Any]) -> Reply:
        if request["model"] == "coder":
            return Reply(text=f"```python\n{program}```")
        plan_prompts.append(request["messages"][-1]["content"])
        return Reply(text=plan_reply)

    transcript, _ = _run("plan_tool", script, {"max_turns": 1, "code_seconds": 10}, task)
    return transcript, plan_prompts


def test_a_9x9_sudoku_fill_list_printed_by_python_is_read_whole() -> None:
    # The program reads the grid on stdin and prints the fills of its blanks as Python prints a
    # list of tuples: longer than the end of the output the plan agent is shown.
    from mas.reasoner_tool import OUTPUT_SHOWN

    level = make_level("sudoku", "eval", 0, size=9)
    solution = [list(row) for row in level.solution]
    program = (
        "import ast, sys\n"
        "text = sys.stdin.read()\n"
        "grid = ast.literal_eval(text[text.index('[['):text.index(']]') + 2])\n"
        f"solution = {solution!r}\n"
        "blanks = [(r, c) for r in range(9) for c in range(9) if grid[r][c] == 0]\n"
        "print('Actions:', [(r, c, solution[r][c]) for r, c in blanks])\n"
    )
    clues = level.layout.clues
    fills = [[r, c, solution[r][c]] for r in range(9) for c in range(9) if clues[r][c] == 0]
    printed = "Actions: " + str([tuple(fill) for fill in fills])
    assert len(printed) > OUTPUT_SHOWN
    task = Task(prompt="", kind="puzzle", metadata={"environment": level.ref})
    transcript, prompts = _tool_round(task, program, "#### [[0, 0, 0]]")
    record = transcript.extra["rounds"][0]
    assert record["execution"] == "ok" and record["output"] == printed[-OUTPUT_SHOWN:]
    assert record["tool_actions"] == format_actions("sudoku", fills)
    assert record["tool_outcome"]["solved"]
    rewards = plan_tool_rewards(transcript, level.ref, task)
    own = new_state(level).apply(fills).reward
    assert rewards[("tool", 0)] == pytest.approx(own + rewards[("plan", 0)]) and own > 0
    shown = prompts[0].split("Printed (ok):\n", 1)[1]
    assert shown.startswith(printed[-OUTPUT_SHOWN:]) and printed[:40] not in prompts[0]


def test_a_30x30_plan_path_list_of_900_moves_printed_by_python_is_read_whole() -> None:
    level = make_level("plan_path", "eval", 0, size=30)
    first = level.solution[0]
    back = {"U": "D", "D": "U", "L": "R", "R": "L"}[first]
    moves = [first, back] * ((900 - len(level.solution)) // 2) + list(level.solution)
    assert len(moves) >= 899
    program = f"print('Actions:', {moves!r})\n"  # ['R', 'L', ...]: about 4,500 characters
    task = Task(prompt="", kind="puzzle", metadata={"environment": level.ref})
    transcript, _ = _tool_round(task, program, "no list")
    record = transcript.extra["rounds"][0]
    assert record["tool_actions"] == format_actions("plan_path", moves)
    assert record["tool_outcome"]["solved"] and record["tool_outcome"]["applied"] == len(moves)
    assert plan_tool_rewards(transcript, level.ref, task)[("tool", 0)] == pytest.approx(
        new_state(level).apply(moves).reward
    )
