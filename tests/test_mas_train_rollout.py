"""Tree-sampled rollouts of the reasoner + tool workflow: real workflow code, real sandbox,
scripted role models (deterministic replies), rewards and branch returns checked by hand."""

from __future__ import annotations

import asyncio
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.endpoint import Message
from mas.base import Task
from train_backend.advantage import compute_advantages
from train_backend.mas.data import Problem
from train_backend.mas.rewards import reasoner_tool_rewards
from train_backend.mas.rollout import RoleModel, play_workflow_step, tree_sample

CORRECT = "```python\nprint(2 + 3)\n```"
WRONG = "```python\nprint(7)\n```"
LOOP = "```python\nwhile True:\n    pass\n```"
PROBLEM = Problem("p0", "What is 2 + 3?", "5", "test")
FAST = {"code_seconds": 2.0}


def _text_of(messages: list[Message]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class Scripted:
    """A role model whose replies are scripted: the n-th reply to the same prompt is
    `replies[n % len(replies)]`, or `reply(prompt)` when given a function."""

    def __init__(self, name: str, replies: list[str] | None = None, reply=None) -> None:
        self.seen: Counter[str] = Counter()
        self.places: list[tuple[tuple[int, ...], str]] = []  # each generated call's (place, prompt)
        self.replies = replies
        self.reply = reply
        self.model = RoleModel(name, self.encode, self.generate, self.decode)

    @staticmethod
    def encode(messages: list[Message]) -> list[int]:
        return [ord(c) for c in _text_of(messages)]

    @staticmethod
    def decode(ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    async def generate(self, prompt_ids: list[int], place: tuple[int, ...]) -> list[int]:
        prompt = self.decode(prompt_ids)
        self.places.append((place, prompt))
        count = self.seen[prompt]
        self.seen[prompt] += 1
        if self.reply is not None:
            text = self.reply(prompt)
        else:
            assert self.replies is not None
            text = self.replies[count % len(self.replies)]
        return [ord(c) for c in text]


def echo_reasoner(prompt: str) -> str:
    """Answers what the program printed when it ran, else 4 (wrong)."""
    found = re.search(r"Printed \(ok\):\n(\S+)", prompt)
    return f"\\boxed{{{found.group(1) if found else 4}}}"


def _tree(
    tool: Scripted,
    reasoner: Scripted,
    branches: int,
    continuation: str = "greedy",
    options: dict | None = None,
):
    roles = {"tool": tool.model, "reasoner": reasoner.model}
    return asyncio.run(
        tree_sample(
            "reasoner_tool", PROBLEM, 0, roles, options or FAST, branches=branches,
            continuation=continuation, rng=np.random.default_rng(0),
        )
    )  # fmt: skip


def test_branch_returns_follow_the_rewards_and_greedy_continues_with_the_best() -> None:
    tool = Scripted("policy", [CORRECT, LOOP])
    reasoner = Scripted("policy", reply=echo_reasoner)
    branches, main = _tree(tool, reasoner, branches=2)
    by_call = defaultdict(list)
    for branch in branches:
        by_call[(branch.call.agent, branch.call.index)].append(branch.ret)
    # Tool call 0: the correct program ends the run at once (tool 1 + 1, reasoner right);
    # the infinite loop times out (-1 + 0), then round 1's fresh prompt gets the correct
    # program (+2): return -1 + 2 = 1.
    assert by_call[("tool", 0)] == [2.0, 1.0]
    # Greedy continues with the correct program: the reasoner's two replies both answer 5.
    assert by_call[("reasoner", 0)] == [2.0, 2.0]
    assert set(by_call) == {("tool", 0), ("reasoner", 0)}
    assert main.correct and main.transcript.stop_reason == "agreed"
    assert main.rewards == {("tool", 0): 2.0, ("reasoner", 0): 2.0}


def test_a_hostile_branch_is_a_minus_one_with_its_reason_and_the_rollout_goes_on() -> None:
    tool = Scripted("policy", [LOOP])
    reasoner = Scripted("policy", reply=echo_reasoner)
    # every program loops: a short limit, since each one is waited out
    branches, main = _tree(tool, reasoner, branches=1, options={"code_seconds": 0.5})
    rounds = main.transcript.extra["rounds"]
    assert [r["execution"] for r in rounds] == ["timeout", "timeout"]
    assert main.rewards == {
        ("tool", 0): -1.0, ("reasoner", 0): 0.0, ("tool", 1): -1.0, ("reasoner", 1): 0.0,
    }  # fmt: skip
    assert main.transcript.stop_reason == "round_limit" and not main.correct
    assert [b.ret for b in branches if b.call.agent == "tool"] == [-2.0, -1.0]


@pytest.mark.parametrize(
    ("program", "reason"),
    [
        ("import os\nwhile True:\n    os.fork()", "processes"),
        ("x = bytearray(8 * 1024 ** 3)\nprint(len(x))", "memory"),
        ("print('y' * 10 ** 8)", "output"),
    ],
)
def test_hostile_programs_end_as_minus_one_with_the_sandbox_reason(
    program: str, reason: str, tmp_path: Path
) -> None:
    tool = Scripted("policy", [f"```python\n{program}\n```"])
    reasoner = Scripted("policy", reply=echo_reasoner)
    _, main = _tree(tool, reasoner, branches=1)
    first = main.transcript.extra["rounds"][0]
    assert first["execution"] == reason
    assert main.rewards[("tool", 0)] == -1.0


def test_a_write_outside_the_sandbox_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    tool = Scripted("policy", [f"```python\nopen({str(target)!r}, 'w').write('x')\n```"])
    reasoner = Scripted("policy", reply=echo_reasoner)
    _, main = _tree(tool, reasoner, branches=1)
    # "error" (FileNotFoundError) where the sandbox's hidden root has no such folder at all
    assert main.transcript.extra["rounds"][0]["execution"] in ("filesystem", "permission", "error")
    assert main.rewards[("tool", 0)] == -1.0
    assert not target.exists()


def test_rewards_by_hand_wrong_output_and_a_missing_program() -> None:
    task = Task(prompt="q")
    transcript = type("T", (), {})()
    transcript.extra = {
        "rounds": [
            {"execution": "ok", "tool_answer": "7", "reasoner_answer": "5"},
            {"execution": "no_code", "tool_answer": None, "reasoner_answer": "6"},
        ]
    }
    rewards = reasoner_tool_rewards(transcript, "5", task)
    assert rewards == {
        ("tool", 0): 0.0 + 1.0, ("reasoner", 0): 2.0, ("tool", 1): -1.0, ("reasoner", 1): 0.0,
    }  # fmt: skip


def test_a_step_gives_at_grpo_rows_grouped_by_problem_role_and_call_with_each_roles_policy() -> (
    None
):
    tool = Scripted("coder", [CORRECT, WRONG, LOOP])
    reasoner = Scripted("thinker", reply=echo_reasoner)
    problems = [PROBLEM, Problem("p1", "What is 2 + 3, again?", "5", "test")]
    rollout = asyncio.run(
        play_workflow_step(
            "reasoner_tool", problems, {"tool": tool.model, "reasoner": reasoner.model}, FAST,
            branches=3, continuation="greedy", seed=0,
        )
    )  # fmt: skip
    assert len(rollout.rows) == len(rollout.samples) == len({id(s) for s in rollout.samples})
    groups = defaultdict(list)
    for row, sample in zip(rollout.rows, rollout.samples, strict=True):
        assert row["policy"] == {"tool": "coder", "reasoner": "thinker"}[row["role"]]
        assert (sample.episode, sample.seat, sample.turn) == (
            row["episode"],
            row["seat"],
            row["turn"],
        )
        groups[(row["episode"], row["seat"], row["turn"])].append(row)
    # Every group holds the K = 3 branches of one call, all from the same prompt.
    assert all(len(rows) == 3 and len({r["state"] for r in rows}) == 1 for rows in groups.values())
    tool_first = [r["reward"] for r in groups[(0, 0, 0)]]
    assert tool_first == [
        2.0,
        0.0,
        -1.0 + 2.0,
    ]  # correct; wrong (both agree on 7); loop, then right
    advantages = compute_advantages(pd.DataFrame(rollout.rows), "at_grpo")
    first = [
        i for i, r in enumerate(rollout.rows) if (r["episode"], r["seat"], r["turn"]) == (0, 0, 0)
    ]
    assert advantages[first[0]] > 0 > advantages[first[1]]  # returns 2, 0, 1: mean 1
    assert advantages[first[2]] == pytest.approx(0.0)
    assert [record["correct"] for record in rollout.records] == [True, True]


def test_mad_debaters_are_rewarded_for_their_own_answers_and_the_moderator_for_the_verdict() -> (
    None
):
    def side(answer: str) -> Scripted:
        return Scripted("policy", [f"My answer: \\boxed{{{answer}}}"])

    verdict = '{"preferred_side": "negative", "answer": "5", "reason": "checked"}'
    roles = {
        "affirmative": side("4").model,
        "negative": side("5").model,
        "moderator": Scripted("policy", [verdict]).model,
        "judge": Scripted("policy", ["unused"]).model,
    }
    branches, main = asyncio.run(
        tree_sample(
            "mad", PROBLEM, 0, roles, {"rounds": 2}, branches=2, continuation="greedy",
            rng=np.random.default_rng(0),
        )
    )  # fmt: skip
    assert main.rewards == {("affirmative", 0): 0.0, ("negative", 0): 2.0, ("moderator", 0): 2.0}
    assert main.correct and main.transcript.extra["decided_by"] == "moderator"
    returns = {(b.call.agent, b.call.index): b.ret for b in branches}
    assert returns == {("affirmative", 0): 0.0, ("negative", 0): 2.0, ("moderator", 0): 2.0}


def test_mad_without_a_decisive_moderator_rewards_the_judge_for_the_final_answer() -> None:
    undecided = '{"preferred_side": "none", "answer": "", "reason": "unsure"}'
    roles = {
        "affirmative": Scripted("policy", ["\\boxed{4}"]).model,
        "negative": Scripted("policy", ["\\boxed{5}"]).model,
        "moderator": Scripted("policy", [undecided]).model,
        "judge": Scripted(
            "policy", ['{"preferred_side": "affirmative", "answer": "4", "reason": "r"}']
        ).model,
    }
    _, main = asyncio.run(
        tree_sample(
            "mad", PROBLEM, 0, roles, {"rounds": 2}, branches=1, continuation="greedy",
            rng=np.random.default_rng(0),
        )
    )  # fmt: skip
    assert main.transcript.extra["decided_by"] == "judge" and not main.correct
    assert main.rewards == {
        ("affirmative", 0): 0.0, ("affirmative", 1): 0.0, ("negative", 0): 0.0,
        ("negative", 1): 2.0, ("moderator", 0): 0.0, ("moderator", 1): 0.0, ("judge", 0): 0.0,
    }  # fmt: skip


class ByPlace(Scripted):
    """Replies chosen by the call's place in the tree, after a random delay: the replies reach
    the tree in an order that changes with `delay_seed`."""

    def __init__(self, name: str, replies: list[str], delay_seed: int) -> None:
        super().__init__(name, replies)
        self.delays = np.random.default_rng(delay_seed)

    async def generate(self, prompt_ids: list[int], place: tuple[int, ...]) -> list[int]:
        await super().generate(prompt_ids, place)
        await asyncio.sleep(float(self.delays.uniform(0, 0.01)))
        assert self.replies is not None
        return [ord(c) for c in self.replies[sum(place) % len(self.replies)]]


def test_every_generated_call_has_its_own_place_whatever_order_replies_arrive_in() -> None:
    """A rollout seeds each call's sampling by its place (verl, `verl: {deterministic: true}`):
    the places must be unique within a tree and must not depend on timing."""
    seen = []
    for delay_seed in (0, 1, 2):
        tool = ByPlace("policy", [CORRECT, WRONG, LOOP.replace("True", "False")], delay_seed)
        reasoner = ByPlace("policy", ["\\boxed{5}", "\\boxed{4}"], delay_seed + 10)
        branches, main = _tree(tool, reasoner, branches=3, continuation="random")
        seen.append(
            (
                tool.places,
                reasoner.places,
                [(b.call, b.ret, b.branch, b.chosen) for b in branches],
                main.rewards,
            )
        )
    # the same calls at the same places, whatever the order they were answered in
    assert [sorted(places) for places in seen[0][:2]] == [sorted(p) for p in seen[1][:2]]
    assert [sorted(places) for places in seen[0][:2]] == [sorted(p) for p in seen[2][:2]]
    assert seen[0][2:] == seen[1][2:] == seen[2][2:]
    places = [place for place, _ in seen[0][0] + seen[0][1]]
    assert len(places) == len(set(places))  # no two calls of the tree share a place
    # K = 3 runs at each branched point, each its own (point, run) and call position
    assert {place[:2] for place, _ in seen[0][0]} >= {(0, 0), (0, 1), (0, 2)}


def test_with_branch_roles_a_partners_calls_are_answered_once_and_never_branched() -> None:
    tool = Scripted("partner", [WRONG])  # a frozen partner: one reply per prompt is asked
    reasoner = Scripted("policy", ["\\boxed{5}", "\\boxed{7}", "\\boxed{4}"])
    roles = {"tool": tool.model, "reasoner": reasoner.model}
    branches, main = asyncio.run(
        tree_sample(
            "reasoner_tool", PROBLEM, 0, roles, {**FAST, "rounds": 1}, branches=3,
            continuation="greedy", rng=np.random.default_rng(0), branch_roles=["reasoner"],
        )
    )  # fmt: skip
    assert {branch.call.agent for branch in branches} == {"reasoner"}
    assert sorted(branch.ret for branch in branches) == [0.0, 0.0, 2.0]
    # The tool's prompt was asked once in the main line; the reasoner's three times (K = 3),
    # each of its runs replaying the same tool reply.
    assert sum(tool.seen.values()) == 1 and sum(reasoner.seen.values()) == 3
    assert main.correct  # greedy continued with the right answer
