"""The starting model of the planning miniature: the tiny model taught plan_tool's reply formats.

As for the arithmetic miniature (`train_backend.mas.pretrain`), this teaches the format, not the
skill, on the training levels of a small Plan-Path suite with the workflow's own prompts
(`mas.plan_tool`):

- tool agent: one of two programs that read the current state on stdin and breadth-first search
  the grid: `RIGHT_PROGRAM` (with probability `tool_right`) prints a shortest move list;
  `WRONG_PROGRAM` differs in one token (U and D swapped), so the list it prints walks the wrong
  way. Which program is written is one sampled token, so reinforcement can move it;
- plan agent: `#### [...]` with the list the program printed with probability `plan_copies`,
  else a random list of 1-6 moves;
- plan agent alone (`plan_single`, the baseline): the right list with probability
  `solver_right`, else a random one (the tiny model cannot plan in its head).

Two stages, as for arithmetic: `copy_steps` on faithful replies (the right program, the copied
list), then `steps` at the rates above. Built once into `$MARS_CACHE_DIR/<name>`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.puzzles import PuzzleState, format_actions, level_from_ref, new_state, parse_actions
from mas.plan_tool import (
    PLAN_ALONE_SYSTEM,
    PLAN_SYSTEM,
    TOOL_SYSTEM,
    plan_alone_prompt,
    plan_prompt,
    tool_prompt,
    tried_line_for,
)
from train_backend.format_data import Example
from train_backend.mas.data import puzzle_problems
from train_backend.mas.pretrain import build_start

PLAN_START_NAME = "plan-mas"
MOVES = ("U", "D", "L", "R")

# Breadth-first search over the grid rows of the observation on stdin; a cell is marked "#" when
# first reached, and the goal's list is printed as soon as it is reached.
RIGHT_PROGRAM = """import sys
g=[r.split()for r in sys.stdin][1:-1]
q=[(i,r.index("P"),"")for i,r in enumerate(g)if"P"in r]
for i,j,p in q:
 for m,a,b in("U",-1,0),("D",1,0),("L",0,-1),("R",0,1):
  x,y=i+a,j+b
  if-1<x<len(g)and-1<y<len(g)and g[x][y]!="#":
   if g[x][y]=="G":print("Actions: ["+", ".join(p+m)+"]");sys.exit()
   g[x][y]="#";q+=[(x,y,p+m)]
"""
WRONG_PROGRAM = RIGHT_PROGRAM.replace('("U",-1,0),("D",1,0)', '("U",1,0),("D",-1,0)')


class PlanPretrainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    suite: str = "plan_path_5x5"
    examples: int = Field(1200, ge=1)
    copy_steps: int = Field(1200, ge=0)
    steps: int = Field(300, ge=0)
    batch_size: int = Field(8, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    tool_right: float = Field(0.5, ge=0, le=1)
    plan_copies: float = Field(0.5, ge=0, le=1)
    solver_right: float = Field(0.1, ge=0, le=1)
    seed: int = 0

    def faithful(self) -> PlanPretrainSettings:
        return self.model_copy(update={"tool_right": 1.0, "plan_copies": 1.0})


def printed_moves(observation: str, swapped: bool) -> list[str]:
    """What RIGHT_PROGRAM (or, `swapped`, WRONG_PROGRAM) prints for a state, computed here the
    same way: the search order U, D, L, R, a cell taken when first reached."""
    grid = [row.split() for row in observation.splitlines()][1:-1]
    steps = {"U": (1 if swapped else -1, 0), "D": (-1 if swapped else 1, 0)}
    steps |= {"L": (0, -1), "R": (0, 1)}
    queue = [(i, row.index("P"), "") for i, row in enumerate(grid) if "P" in row]
    for i, j, path in queue:
        for move in MOVES:
            x, y = i + steps[move][0], j + steps[move][1]
            if 0 <= x < len(grid) and 0 <= y < len(grid) and grid[x][y] != "#":
                if grid[x][y] == "G":
                    return list(path + move)
                grid[x][y] = "#"
                queue.append((x, y, path + move))
    return []


def _random_moves(rng: random.Random) -> list[str]:
    return [rng.choice(MOVES) for _ in range(rng.randint(1, 6))]


def _example(kind: str, system: str, user: str, reply: str) -> Example:
    messages = ({"role": "system", "content": system}, {"role": "user", "content": user})
    return Example(kind, "compact", messages, reply, answer=reply)


def _a_state(level_ref: str, rng: random.Random) -> tuple[PuzzleState, dict | None]:
    """The start (two times in three) or a second round's state after one random move, with
    the first round as the tool agent is shown it."""
    state = new_state(level_from_ref(level_ref))
    if rng.random() < 2 / 3:
        return state, None
    first = [rng.choice(MOVES)]
    state.apply(first)
    if state.done:
        return new_state(level_from_ref(level_ref)), None
    return state, {"execution": "ok", "plan_actions": format_actions("plan_path", first)}


def plan_examples(settings: PlanPretrainSettings) -> list[Example]:
    rng = random.Random(settings.seed)
    examples: list[Example] = []
    for problem in puzzle_problems(settings.suite, "train", settings.examples):
        state, previous = _a_state(problem.answer, rng)
        right = rng.random() < settings.tool_right
        code = RIGHT_PROGRAM if right else WRONG_PROGRAM
        user = tool_prompt(state, previous)
        examples.append(_example("tool", TOOL_SYSTEM, user, f"```python\n{code}```"))
        moves = printed_moves(state.observation(), swapped=not right)
        output = f"Actions: {format_actions('plan_path', moves)}"
        actions = parse_actions("plan_path", output)
        tried = state.copy().apply(actions) if actions is not None else None
        user = plan_prompt(state, code, output, "ok", tried_line_for("plan_path", actions, tried))
        answer = moves if rng.random() < settings.plan_copies else _random_moves(rng)
        reply = f"#### {format_actions('plan_path', answer)}"
        examples.append(_example("plan", PLAN_SYSTEM, user, reply))
        alone = printed_moves(state.observation(), swapped=False)
        if rng.random() >= settings.solver_right:
            alone = _random_moves(rng)
        reply = f"#### {format_actions('plan_path', alone)}"
        examples.append(_example("plan_single", PLAN_ALONE_SYSTEM, plan_alone_prompt(state), reply))
    return examples


def ensure_plan_start(
    settings: PlanPretrainSettings | None = None,
    name: str = PLAN_START_NAME,
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """The planning miniature's starting model, built on first use (minutes on a CPU)."""
    settings = settings or PlanPretrainSettings()
    stages = [(settings.faithful(), settings.copy_steps), (settings, settings.steps)]
    return build_start(settings, stages, plan_examples, name, on_step)
