"""Per-role, per-turn rewards of a workflow run, read from its transcript (docs/mas_training.md).

A reward function maps (transcript, reference answer, task) to {(agent, k): reward}: the reward
of agent's k-th call in the run (k from 0). The trainer's branch return for a call is the sum of
that agent's rewards from that call to the end of the run.

`reasoner_tool` (after Stronger-MAS's math environment, whose code adds team and local rewards):
in round r the reasoner gets 2 * [its answer is correct]; the tool agent gets +1 when its
program ran and printed the correct answer, 0 when it ran and printed something else, -1 when it
failed (no code block, or any sandbox reason: timeout, memory, output, processes, ...), plus
[the reasoner's answer of round r is correct].

`single` (the single-agent baseline, `mas/single.py`): the solver gets 2 * [correct].

`mad` (the evaluation's MAD debate, `mas/mad.py`): each debater is rewarded for its own final
answer, the moderator and the judge for the debate's final answer (`mad_rewards`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from core.errors import MarsError
from mas.answers import answer_key, extract_answer
from mas.base import Task, Transcript

RewardFn = Callable[[Transcript, str, Task], dict[tuple[str, int], float]]


def correct(answer: str | None, reference: str, task: Task) -> bool:
    return answer is not None and answer_key(answer, task.kind) == answer_key(reference, task.kind)


def reasoner_tool_rewards(
    transcript: Transcript, reference: str, task: Task
) -> dict[tuple[str, int], float]:
    rewards: dict[tuple[str, int], float] = {}
    for index, record in enumerate(transcript.extra.get("rounds", [])):
        reasoner_right = correct(record["reasoner_answer"], reference, task)
        if record["execution"] != "ok":
            tool = -1.0
        else:
            tool = 1.0 if correct(record["tool_answer"], reference, task) else 0.0
        rewards[("tool", index)] = tool + float(reasoner_right)
        rewards[("reasoner", index)] = 2.0 * float(reasoner_right)
    return rewards


def single_rewards(
    transcript: Transcript, reference: str, task: Task
) -> dict[tuple[str, int], float]:
    """`single`, the single-agent baseline: the solver gets 2 * [its answer is correct], as the
    reasoner does (so single-agent GRPO and the workflow's reasoner see the same scale)."""
    answer = extract_answer(task, transcript.final_answer)
    return {("solver", 0): 2.0 * float(correct(answer, reference, task))}


MAD_SIDES = ("affirmative", "negative")
MAD_DECIDERS = ("moderator", "judge")


def mad_rewards(transcript: Transcript, reference: str, task: Task) -> dict[tuple[str, int], float]:
    """`mad` (the evaluation's MAD protocol): each debater's last call gets 2 * [its own final
    answer is correct]; the last call of the moderator and of the judge (when one was asked)
    gets 2 * [the debate's final answer, resolved from their verdict, is correct]. Every other
    call gets 0, so a branch's return is what its agent's last say earned."""
    candidates = transcript.extra.get("candidates")
    if candidates is None:
        raise MarsError(
            "mad training rewards read the built-in protocol's transcript, not maslab's"
        )
    calls = Counter(message.agent for message in transcript.messages)
    final_right = correct(extract_answer(task, transcript.final_answer), reference, task)
    rewards: dict[tuple[str, int], float] = {}
    for agent, count in calls.items():
        rewards.update({(agent, index): 0.0 for index in range(count)})
        if agent in MAD_SIDES:
            right = correct(candidates.get(agent), reference, task)
        elif agent in MAD_DECIDERS:
            right = final_right
        else:
            continue
        rewards[(agent, count - 1)] = 2.0 * float(right)
    return rewards


REWARDS: dict[str, RewardFn] = {
    "reasoner_tool": reasoner_tool_rewards,
    "single": single_rewards,
    "mad": mad_rewards,
}
# The roles of each workflow, in seat order (a role's index is its `seat` in the turn table).
ROLES: dict[str, tuple[str, ...]] = {
    "reasoner_tool": ("tool", "reasoner"),
    "single": ("solver",),
    "mad": (*MAD_SIDES, *MAD_DECIDERS),
}


def reward_function(workflow: str) -> RewardFn:
    if workflow not in REWARDS:
        raise MarsError(
            f"no training rewards for workflow {workflow!r}; trainable: {', '.join(REWARDS)}"
        )
    return REWARDS[workflow]
