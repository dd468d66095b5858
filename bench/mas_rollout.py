"""Do tree-sampled MAS rollouts keep the trainer busy? Wall time over the critical path.

`play_workflow_step` runs `--problems` workflows at once (`reasoner_tool`, 2 rounds), each tree
sampled with K = `--branches` runs per call of its main line. The role models are scripted: each
call waits `--latency` seconds (a model answering in that time) and replies with a fixed text,
so the replies, the tree and every chain of calls are known, and no model or sandbox time is
mixed in (the tool's reply has no program; the reasoner never agrees, so every run goes to the
round limit).

Ideal: a tree's main line is sequential, node after node; at each node its K runs go in
parallel, each a chain of calls. So a tree's critical path is the sum over its nodes of the
longest run's generated calls x latency, and the step's ideal is the longest tree's. The figure
is wall time / ideal (target <= 1.3 at 16 workflows in flight).

Run: .venv/bin/python bench/mas_rollout.py [--problems 16] [--branches 4] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import report

TARGET = 1.3
ROUNDS = 2
CALLS = 2 * ROUNDS  # tool, reasoner per round; no round ends early here


def critical_path_calls() -> int:
    """At node i (0-based) the K runs replay i calls and generate the remaining CALLS - i."""
    return sum(CALLS - node for node in range(CALLS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from train_backend.mas.data import arithmetic_problems
    from train_backend.mas.rollout import RoleModel, play_workflow_step

    generated = 0
    replies = ["no program", "\\boxed{1}"]

    def scripted(reply: int) -> RoleModel:
        """A reply is one token (its index); a prompt, one token per message (its hash): the
        model's own cost is the latency alone."""

        async def generate(prompt_ids: list[int]) -> list[int]:
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

    roles = {"tool": scripted(0), "reasoner": scripted(1)}
    problems = arithmetic_problems(args.problems, 0)
    ideal = critical_path_calls() * args.latency
    ratios = []
    asyncio.run(
        play_workflow_step(
            "reasoner_tool", problems[:1], roles, {"rounds": ROUNDS}, branches=1,
            continuation="random", seed=0,
        )
    )  # fmt: skip  # warm-up: imports and first-call costs out of the timing
    for repeat in range(args.repeats):
        generated = 0
        started = time.perf_counter()
        rollout = asyncio.run(
            play_workflow_step(
                "reasoner_tool", problems, roles, {"rounds": ROUNDS}, branches=args.branches,
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
        problems=args.problems,
        branches=args.branches,
        latency_s=args.latency,
        calls_per_step=generated,
    )


if __name__ == "__main__":
    main()
