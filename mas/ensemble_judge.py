"""`ensemble_judge`: N reasoners and M tool agents answer, a judge decides (Stronger-MAS Figure 5).

After the ensemble workflow of Stronger-MAS (PettingLLMs' `math_aggretion`; docs/mas_training.md),
written from its description: `reasoners` reasoners (default 2) each solve the problem and answer
in `\\boxed{}`; `tools` tool agents (default 1) each write a Python program that prints the answer,
run in the sandbox (`code_seconds`, default 10); then a judge sees every solution (each cut at
2,000 characters) and every program's output and answers in `\\boxed{}`: the final answer.

The calls run one after another (reasoners, tools, judge), so a run is deterministic given its
replies and a trainer can replay it. Every reasoner is the agent `reasoner` (its k-th call is the
k-th reasoner), every tool agent `tool`: one role each for one policy per role.
`transcript.extra` keeps each reasoner's answer and each program's run and answer, which the
training rewards read (`train_backend.mas.rewards.ensemble_judge_rewards`).
"""

from __future__ import annotations

from typing import Any

from harness.sandbox import SandboxLimits, run_python_async
from mas.answers import extract_answer
from mas.base import Conversation, Models, Task, Transcript, mas
from mas.options import int_option, seconds_option
from mas.prompts import answer_format
from mas.reasoner_tool import TOOL_SYSTEM, printed_answer, run_reply_program, shown_output

SOLUTION_SHOWN = 2000  # characters of each solution the judge reads (the reference's cut)

REASONER_SYSTEM = (
    "You are a careful problem solver. Think step by step, then give the final answer."
)
JUDGE_SYSTEM = (
    "You are a judge. Several agents solved the same problem; some wrote programs. Check their "
    "work, decide which answer is right, and give it inside \\boxed{}."
)


def judge_prompt(task: Task, solutions: list[str], programs: list[dict[str, Any]]) -> str:
    parts = [task.prompt, ""]
    for index, solution in enumerate(solutions):
        parts.append(f"Solution {index + 1}:\n{solution[:SOLUTION_SHOWN]}\n")
    for index, program in enumerate(programs):
        shown = program["output"] or "(nothing)"
        parts.append(f"Program {index + 1} ({program['execution']}) printed:\n{shown}\n")
    parts.append(f"Give {answer_format(task)}.")
    return "\n".join(parts)


@mas("ensemble_judge", roles=("reasoner", "tool", "judge"))
async def ensemble_judge(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    reasoners = int_option(config, "reasoners", 2)
    tools = int_option(config, "tools", 1, minimum=0)
    limits = SandboxLimits(wall_seconds=seconds_option(config, "code_seconds", 10.0))
    run_code = config.get("code_runner", run_python_async)
    conversation = Conversation(models, task)
    solutions: list[str] = []
    answers: list[str | None] = []
    for index in range(reasoners):
        reply = await conversation.ask(
            "reasoner",
            REASONER_SYSTEM,
            f"{task.prompt}\n(Solver {index + 1} of {reasoners}.)",
            round=0,
        )
        solutions.append(reply.text)
        answers.append(extract_answer(task, reply.text))
    programs: list[dict[str, Any]] = []
    for index in range(tools):
        reply = await conversation.ask(
            "tool", TOOL_SYSTEM, f"{task.prompt}\n(Tool agent {index + 1} of {tools}.)", round=0
        )
        code, execution, stdout = await run_reply_program(reply.text, run_code, limits)
        output = shown_output(stdout)
        answer = printed_answer(output) if execution == "ok" else None
        programs.append({"code": code, "execution": execution, "output": output, "answer": answer})
    judge = await conversation.ask(
        "judge", JUDGE_SYSTEM, judge_prompt(task, solutions, programs), round=1
    )
    transcript = conversation.transcript
    transcript.final_answer = judge.text
    transcript.rounds = 2
    transcript.stop_reason = "judged"
    transcript.extra = {"reasoner_answers": answers, "programs": programs}
    return transcript
