"""`plan_tool` and `plan_single`: Stronger-MAS's planning workflow on a puzzle (docs/puzzles.md).

Each round (up to `max_turns`, default 4), tool agent first: the tool agent writes a Python
program that prints a move list; the program runs in the sandbox (`harness.sandbox`: its own
process, limits, no network) with the current state's text on its stdin (the reference's
program must copy the grid into its code: a departure, docs/puzzles.md), and the list it
printed, read from all its output, is tried on a copy of the puzzle's state;
the plan agent sees the task, the current state, the program, the end of what it printed
(`OUTPUT_SHOWN` characters) and how the tried list went, and answers a move list on a line
`#### [...]`, which is applied to the real state. A reply or an output is read from its last
`mas.answers.MAX_REPLY_CHARS` characters, which bounds the parse's time.
The episode ends when the puzzle is solved or its step limit is hit (`done`), or after
`max_turns` rounds. `plan_single` is the same environment with the plan agent alone: the
single-agent baseline with the same turns.

The puzzle is the task's `metadata["environment"]` (a `harness.puzzles` level ref), set by the
puzzle suites in `mars eval` and by `train_backend.mas.data` in training. The final answer is the
state's own answer (every move applied, or the Sudoku grid) on a `####` line, which the suite's
grader replays on a fresh level. `transcript.extra["rounds"]` keeps, per round, the program, how
its run ended, both lists and their outcomes: the training rewards (`train_backend.mas.rewards`)
are read from it. Config: `max_turns`, `code_seconds` (wall-clock limit of one program, default
10), `rewards` ("default", or "reference": the plan agent's reward counted twice, as the
reference code does); a trainer may pass `code_runner` as for `reasoner_tool` (called with
`stdin=`).
"""

from __future__ import annotations

from typing import Any

from core.errors import MarsError
from harness.puzzles import (
    ListOutcome,
    PuzzleState,
    format_actions,
    level_from_ref,
    make_level,
    new_state,
    parse_actions,
    rules_text,
)
from harness.sandbox import SandboxLimits, run_python_async
from mas.answers import reply_tail
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import int_option, seconds_option, str_option
from mas.reasoner_tool import run_reply_program, shown_output

REWARD_SETTINGS = ("default", "reference")

TOOL_SYSTEM = (
    "You are a tool agent for a puzzle. Write one Python program that finds a solution from the "
    "current state and prints the move list on its last line, as Actions: [...]. The program "
    "reads the current state, exactly as shown, on stdin. Put the program in a ```python code "
    "block."
)
PLAN_SYSTEM = (
    "You are a plan agent for a puzzle. Read the task, the current state and the tool agent's "
    "program, output and tried result, then answer the moves to make now on a last line #### [...]."
)
PLAN_ALONE_SYSTEM = (
    "You are a plan agent for a puzzle. Read the task and the current state, then answer the "
    "moves to make now on a last line #### [...]."
)


def puzzle_of(task: Task) -> PuzzleState:
    """A fresh state of the task's puzzle; MarsError when the task carries none."""
    ref = task.metadata.get("environment")
    if not isinstance(ref, str):
        raise MarsError(
            "plan_tool needs a puzzle task (a puzzle suite: plan_path, sokoban, sudoku, ...)"
        )
    return new_state(level_from_ref(ref))


def outcome_fields(outcome: ListOutcome | None) -> dict[str, Any] | None:
    if outcome is None:
        return None
    return {
        "reward": outcome.reward,
        "applied": outcome.applied,
        "invalid": outcome.invalid,
        "done": outcome.done,
        "solved": outcome.solved,
    }


def task_text(state: PuzzleState) -> str:
    return f"{rules_text(state.level)}\n\nCurrent state:\n{state.observation()}"


def tool_prompt(state: PuzzleState, previous: dict[str, Any] | None) -> str:
    text = task_text(state)
    if previous is not None:
        text += (
            f"\n\nLast round your program ended {previous['execution']}; the plan agent "
            f"answered {previous['plan_actions'] or '(no list)'}."
        )
    return text + "\nWrite the program."


def plan_prompt(
    state: PuzzleState,
    code: str | None,
    output: str,
    execution: str,
    tried: str,
) -> str:
    program = code if code is not None else "(no program)"
    return (
        f"{task_text(state)}\n\nTool agent's program:\n```python\n{program}```\n"
        f"Printed ({execution}):\n{output or '(nothing)'}\n{tried}\n"
        "Answer the moves to make now on a last line #### [...]."
    )


def plan_alone_prompt(state: PuzzleState) -> str:
    return f"{task_text(state)}\nAnswer the moves to make now on a last line #### [...]."


async def _run_tool(
    conversation: Conversation,
    state: PuzzleState,
    previous: dict[str, Any] | None,
    round_number: int,
    run_code: Any,
    limits: SandboxLimits,
) -> dict[str, Any]:
    """The tool agent's turn: its program, how the run ended, the list it printed, tried on a
    copy of the state."""
    env = state.level.env
    tool = await conversation.ask(
        "tool", TOOL_SYSTEM, tool_prompt(state, previous), round=round_number
    )
    code, execution, stdout = await run_reply_program(
        tool.text, run_code, limits, stdin=state.observation()
    )
    # The list is read from all the program printed (the sandbox bounds it; a 9 x 9 Sudoku's
    # fills alone are longer than what the plan agent is shown of it, the output's end).
    actions = parse_actions(env, reply_tail(stdout)) if execution == "ok" else None
    tried = state.copy().apply(actions) if actions is not None else None
    return {
        "code": code,
        "execution": execution,
        "output": shown_output(stdout),
        "tool_actions": format_actions(env, actions) if actions is not None else None,
        "tool_outcome": outcome_fields(tried),
        "tried_line": tried_line_for(env, actions, tried),
    }


def tried_line_for(env: str, actions: list[Any] | None, outcome: ListOutcome | None) -> str:
    if actions is None or outcome is None:
        return "No move list could be read from its output."
    result = "solves the puzzle" if outcome.solved else "does not solve it"
    return (
        f"Its list {format_actions(env, actions)} tried on a copy: {outcome.applied} moves "
        f"applied, {outcome.invalid} invalid, reward {outcome.reward:+.2f}, {result}."
    )


async def play_puzzle(
    task: Task, models: Models, config: dict[str, Any], *, with_tool: bool
) -> Transcript:
    max_turns = int_option(config, "max_turns", 4)
    setting = str_option(config, "rewards", "default")
    if setting not in REWARD_SETTINGS:
        raise MarsError(
            f"MAS option 'rewards' must be one of {', '.join(REWARD_SETTINGS)}, got {setting!r}"
        )
    if with_tool:  # plan_single has no program to run: these are not its options
        limits = SandboxLimits(wall_seconds=seconds_option(config, "code_seconds", 10.0))
        run_code = config.get("code_runner", run_python_async)
    state = puzzle_of(task)
    env = state.level.env
    conversation = Conversation(models, task)
    rounds: list[dict[str, Any]] = []
    for round_number in range(max_turns):
        record: dict[str, Any] = {"round": round_number}
        if with_tool:
            previous = rounds[-1] if rounds else None
            record.update(
                await _run_tool(conversation, state, previous, round_number, run_code, limits)
            )
            prompt = plan_prompt(
                state, record["code"], record["output"], record["execution"], record["tried_line"]
            )
            system = PLAN_SYSTEM
        else:
            prompt, system = plan_alone_prompt(state), PLAN_ALONE_SYSTEM
        plan = await conversation.ask("plan", system, prompt, round=round_number)
        actions = parse_actions(env, reply_tail(plan.text))
        outcome = state.apply(actions) if actions is not None else None
        record.update(
            plan_actions=format_actions(env, actions) if actions is not None else None,
            plan_outcome=outcome_fields(outcome),
            solved=state.solved,
            done=state.done,
        )
        rounds.append(record)
        if state.done:
            break
    transcript = conversation.transcript
    transcript.final_answer = f"#### {state.answer_text()}"
    transcript.rounds = len(rounds)
    transcript.ended_early = len(rounds) < max_turns
    transcript.stop_reason = "solved" if state.solved else ("done" if state.done else "turn_limit")
    transcript.extra = {
        "environment": state.level.ref,
        "rounds": rounds,
        "solved": state.solved,
        "moves_taken": state.moves_taken,
        "rewards": setting,
        "tool": with_tool,
    }
    return transcript


def _probe_task() -> Task:
    """The options check's task: a small Plan-Path level."""
    level = make_level("plan_path", "eval", 0, size=4)
    return Task(
        prompt="",
        sample_id="options-check",
        suite="check",
        kind="puzzle",
        metadata={"environment": level.ref},
    )


@mas("plan_tool", probe_task=_probe_task, kinds=("puzzle",), roles=("tool", "plan"))
async def plan_tool(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    return await play_puzzle(task, models, config, with_tool=True)


@mas("plan_single", probe_task=_probe_task, kinds=("puzzle",), roles=("plan",))
async def plan_single(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    return await play_puzzle(task, models, config, with_tool=False)
