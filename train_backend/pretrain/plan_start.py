"""The starting model of the planning miniature: the tiny model taught plan_tool's reply formats.

As for the arithmetic miniature (`mas_start`), this teaches the format, not the skill, on the
training levels of a small Plan-Path suite with the workflow's own prompts (`mas.plan_tool`):

- tool agent: one of two programs that read the current state on stdin and breadth-first search
  the grid: `RIGHT_PROGRAM` (with probability `tool_right`) prints a shortest move list;
  `WRONG_PROGRAM` differs in one token (U and D swapped), so the list it prints walks the wrong
  way. Which program is written is one sampled token, so reinforcement can move it;
- plan agent: `#### [...]` with the list the program printed with probability `plan_copies`,
  else a random list of 1-6 moves;
- plan agent alone (`plan_single`, the baseline): the right list with probability
  `solver_right`, else a random one (the tiny model cannot plan in its head).

Four stages. Copying a move list out of the prompt is the hard part for the tiny model: on
whole prompts (about 600 tokens, the program among them) it had not started after 2,000 steps
(greedy on held-out levels: 0 of 30 lists copied), while on the prompt's last lines alone it is
learnt in a few hundred (held-out, greedy: 28% copied after 300 steps of 32, 88% after 600, 73%
after 900, 95% after 1,200); 200 steps on whole plan prompts then carried it over (83% on whole
prompts; 2 of 20 when those steps were every role's instead: in a batch of every role the tool
agent's 290-token program outweighs the plan agent's 15-token reply twenty to one in the loss).
So the stages are: `copy_steps` on faithful whole replies of every role (the right program, the
copied list: the formats), then the plan agent's prompt tail (from `Printed` on) with a random
list on each of `tail_examples` levels until its loss has fallen (`tail_steps` bounds it; on
1,200 lists it stalled, memorised rather than copied), then `plan_steps` on the plan agent's
faithful whole replies alone, then `steps` at the rates above.
Built once into `$MARS_CACHE_DIR/<name>`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Literal

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
from train_backend.mas.data import puzzle_problems
from train_backend.pretrain.format_data import Example
from train_backend.pretrain.mas_start import build_start

PLAN_START_NAME = "plan-mas"
TAIL_FROM = "Printed ("  # where the plan agent's prompt tail starts (mas.plan_tool.plan_prompt)
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

    version: int = 5
    suite: str = "plan_path_5x5"
    examples: int = Field(1200, ge=1)
    # the tail stage's levels, each with its own random list: with as few as `examples` (1,200
    # lists seen 16 times each by step 600) its loss stalled at 0.27 without copying
    tail_examples: int = Field(8000, ge=1)
    tail_steps: int = Field(2000, ge=0)  # at most: the stage ends once its loss is under...
    tail_stop_below: float = Field(0.05, gt=0)  # ...this (mean of the last 25 steps)
    tail_batch_size: int = Field(32, ge=1)
    copy_steps: int = Field(600, ge=0)
    plan_steps: int = Field(200, ge=0)
    steps: int = Field(300, ge=0)
    batch_size: int = Field(8, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    tool_right: float = Field(0.5, ge=0, le=1)
    plan_copies: float = Field(0.5, ge=0, le=1)
    solver_right: float = Field(0.1, ge=0, le=1)
    seed: int = 0
    # which examples a stage draws: the plan agent's prompt tails, its whole prompts, or whole
    # prompts of each role
    part: Literal["tail", "plan", "whole"] = "whole"
    stop_below: float | None = None  # set on the tail stage only (see build_start)

    def faithful(self) -> PlanPretrainSettings:
        return self.model_copy(update={"tool_right": 1.0, "plan_copies": 1.0})

    def tails(self) -> PlanPretrainSettings:
        update = {"part": "tail", "batch_size": self.tail_batch_size}
        return self.model_copy(update={**update, "stop_below": self.tail_stop_below})

    def plan_only(self) -> PlanPretrainSettings:
        return self.faithful().model_copy(update={"part": "plan"})


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
    """The start (half the time) or a later round's state after 1-6 random moves, with the
    round before as the tool agent is shown it. (Later rounds after one move only, as the first
    recipe had them, left the model writing no program at all after any other count: greedy,
    15 of 15 second rounds.)"""
    state = new_state(level_from_ref(level_ref))
    if rng.random() < 1 / 2:
        return state, None
    before = _random_moves(rng)
    state.apply(before)
    if state.done:
        return new_state(level_from_ref(level_ref)), None
    return state, {"execution": "ok", "plan_actions": format_actions("plan_path", before)}


def tail_examples(settings: PlanPretrainSettings) -> list[Example]:
    """The plan agent's prompt from `Printed` on, the printed list a random one (1-9 moves) and
    the reply that list: copying alone, on short prompts."""
    rng = random.Random(settings.seed + 1)
    examples: list[Example] = []
    for problem in puzzle_problems(settings.suite, "train", settings.tail_examples):
        state, _ = _a_state(problem.answer, rng)
        moves = [rng.choice(MOVES) for _ in range(rng.randint(1, 9))]
        output = f"Actions: {format_actions('plan_path', moves)}"
        actions = parse_actions("plan_path", output)
        tried = tried_line_for("plan_path", actions, state.copy().apply(actions))
        user = plan_prompt(state, RIGHT_PROGRAM, output, "ok", tried)
        user = user[user.index(TAIL_FROM) :]
        reply = f"#### {format_actions('plan_path', moves)}"
        examples.append(_example("plan", PLAN_SYSTEM, user, reply))
    return examples


def plan_examples(settings: PlanPretrainSettings) -> list[Example]:
    if settings.part == "tail":
        return tail_examples(settings)
    if settings.part == "plan":
        whole = plan_examples(settings.model_copy(update={"part": "whole"}))
        return [example for example in whole if example.kind == "plan"]
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
    stages = [
        (settings.faithful(), settings.copy_steps),
        (settings.tails(), settings.tail_steps),
        (settings.plan_only(), settings.plan_steps),
        (settings, settings.steps),
    ]
    return build_start(settings, stages, plan_examples, name, on_step)
