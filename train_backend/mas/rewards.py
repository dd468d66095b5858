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

The puzzle workflows (`plan_tool`, `plan_single`; a puzzle task through `single`), `code_tester`
and `ensemble_judge`: docs/puzzles.md and docs/mas_training.md give each table and its source.

A reward that reads a reply inline (a final answer, a move list) reads only its last
`mas.answers.MAX_REPLY_CHARS` characters (`reply_tail`), and an answer longer than that is not
correct: every parser of replies is linear (tests/test_parsers_linear.py), and the cap bounds a
reward's time by construction, whatever a policy writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from core.errors import MarsError
from harness.puzzles import ListOutcome, level_from_ref, new_state, parse_actions
from mas.answers import MAX_REPLY_CHARS, answer_key, extract_answer, reply_tail
from mas.base import RewardFn, Task, Transcript, list_mas, system_rewards, system_roles, task_kinds


def correct(answer: str | None, reference: str, task: Task) -> bool:
    """Whether an answer is the reference's (one longer than any reply is read is not)."""
    if answer is None or len(answer) > MAX_REPLY_CHARS:
        return False
    return answer_key(answer, task.kind) == answer_key(reference, task.kind)


def final_answer_of(task: Task, reply: str) -> str | None:
    """The answer the task's grader reads in a reply, read from its end (`reply_tail`)."""
    return extract_answer(task, reply_tail(reply))


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
    reasoner does (so single-agent GRPO and the workflow's reasoner see the same scale). On a
    puzzle, its one list is scored as the plan agent's (`puzzle_list_reward`)."""
    if task.kind == "puzzle":
        return {("solver", 0): puzzle_list_reward(transcript.final_answer, task)}
    answer = final_answer_of(task, transcript.final_answer)
    return {("solver", 0): 2.0 * float(correct(answer, reference, task))}


# --- puzzles (PettingLLMs' stateful env; docs/puzzles.md) ------------------------------

NO_LIST_PENALTY = -2.0  # a reply with no parsable move list (the reference's plan and tool agents)


def played_reply(reply: str, task: Task) -> ListOutcome | None:
    """The reply's move list played on a fresh state of the task's puzzle (None: no list)."""
    state = new_state(level_from_ref(task.metadata["environment"]))
    actions = parse_actions(state.level.env, reply_tail(reply))
    return None if actions is None else state.apply(actions)


def puzzle_list_reward(reply: str, task: Task) -> float:
    """r(the reply's move list) on a fresh state of the task's puzzle; -2 with no list."""
    outcome = played_reply(reply, task)
    return NO_LIST_PENALTY if outcome is None else outcome.reward


def _list_reward(outcome: dict[str, Any] | None) -> float | None:
    return None if outcome is None else float(outcome["reward"])


def plan_tool_rewards(
    transcript: Transcript, reference: str, task: Task
) -> dict[tuple[str, int], float]:
    """Per round r: the plan agent gets r(its list) applied to the real state (x2 under
    `rewards=reference`, where the reference's step and reward function both add it), -2 with
    no list; the tool agent gets r(its printed list, tried on a copy), or -2 with none, plus
    r(the plan agent's list) (0 when the plan agent gave none)."""
    scale = 2.0 if transcript.extra.get("rewards") == "reference" else 1.0
    rewards: dict[tuple[str, int], float] = {}
    for index, record in enumerate(transcript.extra.get("rounds", [])):
        plan = _list_reward(record.get("plan_outcome"))
        rewards[("plan", index)] = NO_LIST_PENALTY if plan is None else scale * plan
        if transcript.extra.get("tool"):
            tool = _list_reward(record.get("tool_outcome"))
            own = NO_LIST_PENALTY if tool is None else tool
            rewards[("tool", index)] = own + (plan or 0.0)
    return rewards


# --- code (docs/mas_training.md) ------------------------------------------------------------------


def code_tester_rewards(
    transcript: Transcript, reference: str, task: Task
) -> dict[tuple[str, int], float]:
    """Per round r: the coder gets its program's pass ratio on the ground-truth tests (0 when its
    reply has no program); the tester gets the share of its tests the reference solution passes
    (their validity) plus 1 when the coder's program is wrong on the ground truth and one of the
    tester's valid tests fails it (a caught bug); a tester with no tests gets 0. The reference
    code's tester reward is always 0 (its golden code is never set)."""
    rewards: dict[tuple[str, int], float] = {}
    for index, record in enumerate(transcript.extra.get("rounds", [])):
        truth = record.get("ground_truth")
        ratio = float(truth["pass_ratio"]) if truth else 0.0  # of the program that stands
        # A reply without a program earns nothing, though the last program stands for the tests.
        rewards[("coder", index)] = ratio if record.get("wrote_code") else 0.0
        if "tests" in record:  # code_single has no tester
            rewards[("tester", index)] = tester_reward(record, ratio)
    return rewards


def tester_reward(record: dict[str, Any], coder_ratio: float) -> float:
    validity = record.get("reference_on_tests")
    if not record.get("tests") or not validity or not validity["ok"]:
        return 0.0
    valid = validity["passed"]
    share = sum(valid) / len(valid)
    on_code = record.get("on_tests")
    caught = (
        coder_ratio < 1.0
        and on_code is not None
        and on_code["ok"]
        and any(v and not p for v, p in zip(valid, on_code["passed"], strict=False))
    )
    return share + float(caught)


def code_success(transcript: Transcript) -> bool:
    """The last program passed every ground-truth test it was run on."""
    rounds = transcript.extra.get("rounds", [])
    truth = rounds[-1].get("ground_truth") if rounds else None
    return bool(truth and truth["ok"] and truth["passed"] and all(truth["passed"]))


def main_line_figures(transcript: dict[str, Any]) -> dict[str, float]:
    """What a step's metrics average over its main lines, beside accuracy: for `code_tester`,
    the last program's ground-truth pass ratio (`code/pass_ratio`) and the share of the tester's
    tests the reference solution passes (`code/test_validity`, over the rounds with tests); for
    the puzzle workflows, whether the puzzle was solved (`puzzle/solved`). Read from a record's
    transcript (a dict, as records.jsonl keeps it)."""
    extra = transcript.get("extra") or {}
    figures: dict[str, float] = {}
    if "solved" in extra:
        figures["puzzle/solved"] = float(bool(extra["solved"]))
    rounds = extra.get("rounds") or []
    truths = [r["ground_truth"] for r in rounds if isinstance(r, dict) and r.get("ground_truth")]
    if truths:
        last = truths[-1]
        figures["code/pass_ratio"] = float(last["pass_ratio"])
    checked = [
        r["reference_on_tests"]
        for r in rounds
        if isinstance(r, dict) and r.get("tests") and r.get("reference_on_tests")
    ]
    if checked:
        shares = [sum(c["passed"]) / len(c["passed"]) if c["passed"] else 0.0 for c in checked]
        figures["code/test_validity"] = float(sum(shares) / len(shares))
    return figures


# --- ensemble (docs/mas_training.md) --------------------------------------------------------------


def ensemble_judge_rewards(
    transcript: Transcript, reference: str, task: Task
) -> dict[tuple[str, int], float]:
    """The k-th reasoner gets [its answer is correct]; the k-th tool agent +1 when its program
    ran and printed the correct answer, 0 when it printed something else, -1 when it failed; the
    judge [the final answer is correct] (the reference's judge reward)."""
    rewards: dict[tuple[str, int], float] = {}
    for index, answer in enumerate(transcript.extra.get("reasoner_answers", [])):
        rewards[("reasoner", index)] = float(correct(answer, reference, task))
    for index, program in enumerate(transcript.extra.get("programs", [])):
        if program["execution"] != "ok":
            rewards[("tool", index)] = -1.0
        else:
            rewards[("tool", index)] = float(correct(program["answer"], reference, task))
    final = final_answer_of(task, transcript.final_answer)
    rewards[("judge", 0)] = float(correct(final, reference, task))
    return rewards


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
    final_right = correct(final_answer_of(task, transcript.final_answer), reference, task)
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


# The built-in workflows' rewards, kept here with their tables and sources. A workflow may declare
# its own instead, in its file (`@mas(name, roles=..., rewards=...)`), which needs no line here.
REWARDS: dict[str, RewardFn] = {
    "reasoner_tool": reasoner_tool_rewards,
    "single": single_rewards,
    "mad": mad_rewards,
    "plan_tool": plan_tool_rewards,
    "plan_single": plan_tool_rewards,
    "code_tester": code_tester_rewards,
    "code_single": code_tester_rewards,
    "ensemble_judge": ensemble_judge_rewards,
}


def _trainable_roles(workflow: str) -> tuple[str, ...] | None:
    """The roles of a workflow that can be trained: a registered MAS that declares its roles and
    has rewards (its own, or REWARDS's); None for any other name."""
    if not isinstance(workflow, str):
        return None
    try:
        roles = system_roles(workflow)
        own = system_rewards(workflow)
    except MarsError:
        return None
    if roles is None or (own is None and workflow not in REWARDS):
        return None
    return roles


class _WorkflowRoles(Mapping[str, tuple[str, ...]]):
    """The roles of each training workflow, in seat order (a role's index is its `seat` in the
    turn table), read from the MAS registry (`@mas(name, roles=...)`): no list to keep."""

    def __getitem__(self, workflow: str) -> tuple[str, ...]:
        roles = _trainable_roles(workflow)
        if roles is None:
            raise KeyError(workflow)
        return roles

    def __iter__(self) -> Iterator[str]:
        return iter([name for name in list_mas() if _trainable_roles(name) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


ROLES: Mapping[str, tuple[str, ...]] = _WorkflowRoles()


def check_problem_kind(workflow: str, kind: str, train_set: str) -> None:
    """One line when a workflow is given problems it cannot score (its rewards would all be 0)."""
    # A workflow that needs one kind says so (mas.base); `single` answers any; the others are
    # scored on a math answer.
    kinds = task_kinds(workflow) or (
        ("math", "puzzle", "code") if workflow == "single" else ("math",)
    )
    if kind not in kinds:
        raise MarsError(
            f"workflow {workflow} trains on {' or '.join(kinds)} problems; the training set "
            f"{train_set!r} holds {kind} problems"
        )


def succeeded(transcript: Transcript, reference: str, task: Task) -> bool:
    """Whether a run did what its task asks: the puzzle solved, every ground-truth test passed,
    or the final answer right."""
    if task.kind == "puzzle":
        if "solved" in transcript.extra:
            return bool(transcript.extra["solved"])
        outcome = played_reply(transcript.final_answer, task)
        return outcome is not None and outcome.solved
    if task.kind == "code":
        return code_success(transcript)
    return correct(final_answer_of(task, transcript.final_answer), reference, task)


def reward_function(workflow: str) -> RewardFn:
    """The workflow's own rewards (declared with `@mas`), else the built-in table's."""
    try:
        own = system_rewards(workflow)
    except MarsError:
        own = None
    if own is not None:
        return own
    if workflow not in REWARDS:
        raise MarsError(
            f"no training rewards for workflow {workflow!r}; trainable: {', '.join(ROLES)}"
        )
    return REWARDS[workflow]
