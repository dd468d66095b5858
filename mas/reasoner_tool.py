"""`reasoner_tool`: a tool agent writes Python that is run, a reasoner answers (Stronger-MAS math).

The workflow of Stronger-MAS's math environment (PettingLLMs), written here from its description:
each round the tool agent writes a Python program for the problem, the program runs in the
sandbox (`harness.sandbox`: its own process, CPU, memory, output and wall-clock limits, no
network, a temporary folder), and the reasoner, shown the program and what it printed, gives
its answer in `\\boxed{}`. The rounds stop when the program's answer (the last line it printed)
and the reasoner's agree, or after `rounds` rounds (default 2: four turns, tool first).

`transcript.extra["rounds"]` keeps, per round, the program, how its run ended (`ok` or the
sandbox's reason, or `no_code`), the tool's and the reasoner's answers: the training rewards
(`train_backend.mas.rewards`) are read from it. Config: `rounds`, `code_seconds` (wall-clock
limit of one program, default 10); a trainer may pass `code_runner`, an async (code, limits) ->
`SandboxResult` that wraps the sandbox (e.g. to reuse the result of a program already run).
"""

from __future__ import annotations

import re
from typing import Any

from harness.sandbox import SandboxLimits, run_python_async
from mas.answers import answer_key, extract_answer
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import int_option, seconds_option

TOOL_SYSTEM = (
    "You are a tool agent. Write one Python program that computes the answer to the problem and "
    "prints only the final answer on its last line. Put the program in a ```python code block."
)
REASONER_SYSTEM = (
    "You are a reasoner. Read the problem, the tool agent's program and what it printed, check "
    "them, and give the final answer inside \\boxed{}."
)
NO_CODE = "no_code"
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def code_of(reply: str) -> str | None:
    """The last fenced code block of a reply, or None when it has none."""
    blocks = _CODE_BLOCK.findall(reply)
    return blocks[-1] if blocks else None


OUTPUT_SHOWN = 500  # characters of a program's output an agent is shown (its end)


def shown_output(stdout: str) -> str:
    """The end of a program's output that an agent is shown: its last OUTPUT_SHOWN characters."""
    return stdout[-OUTPUT_SHOWN:]


async def run_reply_program(
    reply: str, run_code: Any, limits: SandboxLimits, **stdin: str
) -> tuple[str | None, str, str]:
    """(the reply's program, how its run ended: `ok`, `no_code` or the sandbox's reason, all it
    printed, stripped: the sandbox bounds it, `SandboxLimits.output_bytes`); `run_code` is the
    sandbox runner (or a trainer's cached one). What an agent is shown of it: `shown_output`."""
    code = code_of(reply)
    if code is None:
        return None, NO_CODE, ""
    result = await run_code(code, limits, **stdin)
    return code, "ok" if result.ok else str(result.reason), result.stdout.strip()


def printed_answer(stdout: str) -> str | None:
    """What a program answers: the last non-empty line it printed."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def tool_prompt(task: Task, previous: dict[str, Any] | None) -> str:
    if previous is None:
        return task.prompt
    return (
        f"{task.prompt}\n\nYour previous program printed: {previous['output'] or '(nothing)'} "
        f"({previous['execution']}). The reasoner answered: {previous['reasoner_answer']}. "
        "Write a corrected program."
    )


def reasoner_prompt(task: Task, code: str | None, output: str, execution: str) -> str:
    program = code if code is not None else "(no program)"
    return (
        f"{task.prompt}\n\nProgram:\n```python\n{program}```\n"
        f"Printed ({execution}):\n{output or '(nothing)'}"
    )


@mas("reasoner_tool", roles=("tool", "reasoner"))
async def reasoner_tool(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    max_rounds = int_option(config, "rounds", 2)
    limits = SandboxLimits(wall_seconds=seconds_option(config, "code_seconds", 10.0))
    run_code = config.get("code_runner", run_python_async)
    conversation = Conversation(models, task)
    rounds: list[dict[str, Any]] = []
    reply_text = ""
    for round_number in range(max_rounds):
        previous = rounds[-1] if rounds else None
        tool = await conversation.ask(
            "tool", TOOL_SYSTEM, tool_prompt(task, previous), round=round_number
        )
        code, execution, stdout = await run_reply_program(tool.text, run_code, limits)
        output = shown_output(stdout)
        tool_answer = printed_answer(output) if execution == "ok" else None
        reasoner = await conversation.ask(
            "reasoner",
            REASONER_SYSTEM,
            reasoner_prompt(task, code, output, execution),
            round=round_number,
        )
        reply_text = reasoner.text
        reasoner_answer = extract_answer(task, reasoner.text)
        rounds.append(
            {
                "round": round_number,
                "code": code,
                "execution": execution,
                "output": output,
                "tool_answer": tool_answer,
                "reasoner_answer": reasoner_answer,
            }
        )
        if _agree(task, tool_answer, reasoner_answer):
            break
    transcript = conversation.transcript
    transcript.final_answer = reply_text
    transcript.rounds = len(rounds)
    agreed = _agree(task, rounds[-1]["tool_answer"], rounds[-1]["reasoner_answer"])
    transcript.ended_early = len(rounds) < max_rounds
    transcript.stop_reason = "agreed" if agreed else "round_limit"
    transcript.extra = {"rounds": rounds}
    return transcript


def _agree(task: Task, tool_answer: str | None, reasoner_answer: str | None) -> bool:
    if tool_answer is None or reasoner_answer is None:
        return False
    return answer_key(tool_answer, task.kind) == answer_key(reasoner_answer, task.kind)
