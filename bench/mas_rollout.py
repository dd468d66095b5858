"""Do tree-sampled MAS rollouts keep the trainer busy? Wall time over the critical path.

`play_workflow_step` runs `--problems` workflows at once (`--workflow reasoner_tool`, 2 rounds,
on arithmetic; or `plan_tool`, 4 turns, on 5 x 5 Plan-Path levels), each tree sampled with K =
`--branches` runs per call of its main line. The role models are scripted: each call waits
`--latency` seconds (a model answering in that time) and replies with a fixed text, so the
replies, the tree and every chain of calls are known, and no model or sandbox time is mixed in
(the tool's reply has no program; the reasoner never agrees and the plan agent never gives a
list, so every run goes to the round limit; plan_tool's puzzle state is still copied, tried and
rendered at every call).

Ideal: a tree's main line is sequential, node after node; at each node its K runs go in
parallel, each a chain of calls. So a tree's critical path is the sum over its nodes of the
longest run's generated calls x latency, and the step's ideal is the longest tree's. The figure
is wall time / ideal (target <= 1.3 at 16 workflows in flight).

Run: .venv/bin/python bench/mas_rollout.py [--workflow plan_tool] [--problems 16] [--branches 4]
     [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry

TARGET = 1.3
# workflow -> (its options, rounds, the roles' fixed replies in call order within a round)
WORKFLOWS = {
    "reasoner_tool": ({"rounds": 2}, 2, {"tool": "no program", "reasoner": "\\boxed{1}"}),
    "plan_tool": ({"max_turns": 4}, 4, {"tool": "no program", "plan": "no list"}),
}


def critical_path_calls(calls: int) -> int:
    """At node i (0-based) the K runs replay i calls and generate the remaining calls - i."""
    return sum(calls - node for node in range(calls))


def step_problems(args: argparse.Namespace) -> list[Any]:
    from train_backend.mas.arithmetic import arithmetic_problems
    from train_backend.mas.data import puzzle_problems

    if args.workflow == "plan_tool":
        return puzzle_problems("plan_path_5x5", "train", args.problems)
    return arithmetic_problems(args.problems, 0)


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The workflow's options through its own probe, its roles against the scripted ones, its
    rewards, and the step's problems."""
    from core.errors import MarsError
    from mas.base import check_options, get_mas
    from train_backend.mas.rewards import ROLES, reward_function

    options, _, by_role = WORKFLOWS[args.workflow]
    asyncio.run(check_options(get_mas(args.workflow), options, name=args.workflow))
    reward_function(args.workflow)
    if set(by_role) != set(ROLES[args.workflow]):
        raise MarsError(f"{args.workflow}'s roles are {ROLES[args.workflow]}, not {tuple(by_role)}")
    dry.count("workflow config")
    dry.count("problem", len(step_problems(args)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflow", choices=sorted(WORKFLOWS), default="reasoner_tool")
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    from train_backend.mas.rollout import RoleModel, play_workflow_step

    options, rounds, by_role = WORKFLOWS[args.workflow]
    generated = 0
    replies = list(by_role.values())

    def scripted(reply: int) -> RoleModel:
        """A reply is one token (its index); a prompt, one token per message (its hash): the
        model's own cost is the latency alone."""

        async def generate(prompt_ids: list[int], _place: tuple[int, ...]) -> list[int]:
            nonlocal generated
            generated += 1
            await asyncio.sleep(args.latency)
            return [reply]

        return RoleModel(
            "policy",
            lambda messages: [hash(m["content"]) for m in messages],
            generate,
            lambda ids: replies[ids[0]],
        )

    roles = {role: scripted(index) for index, role in enumerate(by_role)}
    problems = step_problems(args)
    ideal = critical_path_calls(len(by_role) * rounds) * args.latency
    ratios = []
    asyncio.run(
        play_workflow_step(
            args.workflow, problems[:1], roles, options, branches=1,
            continuation="random", seed=0,
        )
    )  # fmt: skip  # warm-up: imports and first-call costs out of the timing
    for repeat in range(args.repeats):
        generated = 0
        started = time.perf_counter()
        rollout = asyncio.run(
            play_workflow_step(
                args.workflow, problems, roles, options, branches=args.branches,
                continuation="random", seed=repeat,
            )
        )  # fmt: skip
        wall = time.perf_counter() - started
        ratios.append(wall / ideal)
        print(
            f"repeat {repeat + 1}: {len(rollout.rows)} branches, {generated} calls, "
            f"wall {wall:.3f} s, ideal {ideal:.3f} s"
        )
    report(
        "mas_rollout_wall_over_critical_path",
        sorted(ratios)[len(ratios) // 2],
        TARGET,
        workflow=args.workflow,
        problems=args.problems,
        branches=args.branches,
        latency_s=args.latency,
        calls_per_step=generated,
    )


if __name__ == "__main__":
    main()
