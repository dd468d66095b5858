"""The starting model of the code miniature: the tiny model taught code_tester's reply formats.

On the training problems of `code_mini` (`train_backend.mas.code_problems`) with the workflow's
own prompts (`mas.code_tester`), the format and not the skill:

- coder: a program in a ```python block: the problem's reference solution with probability
  `coder_right`, else the same program with its constant off by one (it runs, and is wrong);
- tester: two `**Test Input:**` / `**Test Output:**` cases from the problem's ground truth, each
  output right with probability `tester_right`, else off by one (an invalid test).

Two stages, as for the other miniatures: `copy_steps` on faithful replies, then `steps` at the
rates above. Built once into `$MARS_CACHE_DIR/<name>`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mas.code_tester import CODER_SYSTEM, TESTER_SYSTEM, coder_prompt, tester_prompt
from train_backend.mas.code_problems import code_problems
from train_backend.mas.rollout import task_of
from train_backend.mas.schedule import CODE_POOL
from train_backend.pretrain.format_data import Example
from train_backend.pretrain.mas_start import build_start

CODE_START_NAME = "code-mas"
_LAST_NUMBER = re.compile(r"(-?\d+)(?!.*\d)", re.DOTALL)


class CodePretrainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    examples: int = Field(1600, ge=1)
    copy_steps: int = Field(800, ge=0)
    steps: int = Field(200, ge=0)
    batch_size: int = Field(16, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    coder_right: float = Field(0.5, ge=0, le=1)
    tester_right: float = Field(0.5, ge=0, le=1)
    seed: int = 0

    def faithful(self) -> CodePretrainSettings:
        return self.model_copy(update={"coder_right": 1.0, "tester_right": 1.0})


def off_by_one(text: str) -> str:
    """`text` with its last integer raised by one (a wrong constant, a wrong output)."""
    match = _LAST_NUMBER.search(text)
    if match is None:
        return text + "x"
    return text[: match.start()] + str(int(match.group(1)) + 1) + text[match.end() :]


def _example(kind: str, system: str, user: str, reply: str) -> Example:
    messages = ({"role": "system", "content": system}, {"role": "user", "content": user})
    return Example(kind, "compact", messages, reply, answer=reply)


def code_examples(settings: CodePretrainSettings) -> list[Example]:
    rng = random.Random(settings.seed)
    pool = code_problems(CODE_POOL, settings.seed)  # training problems only (a hash split)
    examples: list[Example] = []
    for index in range(settings.examples):
        problem = pool[index % len(pool)]
        task = task_of(problem)
        solution = problem.metadata["solution"]
        code = solution if rng.random() < settings.coder_right else off_by_one(solution)
        examples.append(
            _example("coder", CODER_SYSTEM, coder_prompt(task, None), f"```python\n{code}```")
        )
        cases = rng.sample(problem.metadata["tests"], 2)
        blocks = []
        for case in cases:
            wanted = case["expected"]
            if rng.random() >= settings.tester_right:
                wanted = off_by_one(wanted.rstrip("\n")) + "\n"
            blocks.append(
                f"**Test Input:**\n```\n{case['stdin']}```\n**Test Output:**\n```\n{wanted}```"
            )
        user = tester_prompt(task, code, None)
        examples.append(_example("tester", TESTER_SYSTEM, user, "\n".join(blocks)))
    return examples


def ensure_code_start(
    settings: CodePretrainSettings | None = None,
    name: str = CODE_START_NAME,
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """The code miniature's starting model, built on first use (minutes on a CPU)."""
    settings = settings or CodePretrainSettings()
    stages = [(settings.faithful(), settings.copy_steps), (settings, settings.steps)]
    return build_start(settings, stages, code_examples, name, on_step)
