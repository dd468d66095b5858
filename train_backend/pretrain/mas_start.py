"""The starting model of the MAS miniature: the tiny model taught each role's reply format only.

The embedded tiny model writes neither code blocks nor `\\boxed{}` answers, so every workflow
reward would be the same and nothing could be learnt. This pre-training teaches the format, not
the skill, on arithmetic problems (`train_backend.mas.arithmetic`, train split) with the
workflows' own prompts:

- tool agent: a program `answer = EXPR` + `print(answer)` whose expression is the problem's with
  probability `tool_right`, else the problem's with one number changed (it runs, and prints a
  wrong answer). Written after `answer =`, the expression's tokens are the question's own (the
  tokenizer joins a number to the space before it), so copying is one mechanism, not a table;
- reasoner: `\\boxed{N}` with N what the program printed with probability `reasoner_right`, else
  another number;
- single agent (`single`, the baseline): `\\boxed{N}` with N the right answer with probability
  `solver_right`, else another number (the tiny model cannot do the arithmetic in its head).

Two stages. Copying a number out of the prompt is learnt late and suddenly: on faithful data the
tiny model copies about one time in seven after 600 steps and most of the time after 1,200
(measured, greedy, held-out problems); with half the targets wrong it had not started after
1,200. So `copy_steps` first train on faithful tool and reasoner replies (the mechanism), then
`steps` on the rates above (a start that copies about as often as they say). Reinforcement
inside the workflow can then raise how often each role copies faithfully.
Built once into `$MARS_CACHE_DIR/tiny-model-v1-format-mas` and rebuilt when its recipe changes
(`mars tiny-model start tiny_mas`; `tiny_mas_quick` is the tests' one-stage recipe).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.files import build_once
from mas.reasoner_tool import REASONER_SYSTEM, TOOL_SYSTEM, reasoner_prompt, tool_prompt
from mas.single import SOLVER_SYSTEM
from train_backend.mas.arithmetic import arithmetic_problems
from train_backend.mas.data import Problem
from train_backend.mas.rollout import task_of
from train_backend.pretrain.format_data import Example

RECIPE_FILE = "mas_pretrain.json"
MAS_START_NAME = "mas"
_NUMBER = re.compile(r"\d+")


class WorkflowPretrainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 2
    examples: int = Field(3000, ge=1)
    copy_steps: int = Field(1600, ge=0)
    steps: int = Field(400, ge=0)
    batch_size: int = Field(16, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    tool_right: float = Field(0.5, ge=0, le=1)
    reasoner_right: float = Field(0.5, ge=0, le=1)
    solver_right: float = Field(0.1, ge=0, le=1)
    seed: int = 0


# The tests' start (tests/model_testkit.py): one stage of 120 steps, about a minute on a CPU.
# Its tool agent writes programs of the right shape that rarely copy the problem's numbers, so
# the branches of one call still earn different returns (chance answers, broken formats).
QUICK_WORKFLOW_START = WorkflowPretrainSettings(examples=480, copy_steps=0, steps=120)
QUICK_START_NAME = "test-mas-format"


def _expression(problem: Problem) -> str:
    return problem.question.removeprefix("What is ").removesuffix("?")


def _changed(expression: str, rng: random.Random) -> str:
    """The expression with one of its numbers replaced by another digit."""
    numbers = list(_NUMBER.finditer(expression))
    target = rng.choice(numbers)
    value = rng.choice([d for d in range(10) if str(d) != target.group()])
    return expression[: target.start()] + str(value) + expression[target.end() :]


def _other_number(value: str, rng: random.Random) -> str:
    number = int(value) if value.lstrip("-").isdigit() else 0
    low = max(0, number - 9) if number >= 0 else number - 9
    return str(rng.choice([n for n in range(low, number + 10) if n != number]))


def _example(kind: str, system: str, user: str, reply: str, answer: str) -> Example:
    messages = ({"role": "system", "content": system}, {"role": "user", "content": user})
    return Example(kind, "compact", messages, reply, answer=answer)


def workflow_examples(settings: WorkflowPretrainSettings) -> list[Example]:
    rng = random.Random(settings.seed)
    problems = arithmetic_problems(settings.examples, settings.seed)
    examples: list[Example] = []
    for index, problem in enumerate(problems):
        task = task_of(problem)
        expression = _expression(problem)
        right = rng.random() < settings.tool_right
        written = expression if right else _changed(expression, rng)
        code = f"answer = {written}\nprint(answer)\n"
        if index % 3 == 0:  # a second round's tool prompt: the first round's outcome shown
            previous = {
                "output": _other_number(problem.answer, rng),
                "execution": "ok",
                "reasoner_answer": _other_number(problem.answer, rng),
            }
        else:
            previous = None
        user = tool_prompt(task, previous)
        examples.append(_example("tool", TOOL_SYSTEM, user, f"```python\n{code}```", written))
        printed = str(eval(written, {"__builtins__": {}}))  # digits and + - * only: ours
        shown = printed if rng.random() < settings.reasoner_right else _other_number(printed, rng)
        user = reasoner_prompt(task, code, printed, "ok")
        examples.append(_example("reasoner", REASONER_SYSTEM, user, f"\\boxed{{{shown}}}", shown))
        guess = problem.answer
        if rng.random() >= settings.solver_right:
            guess = _other_number(problem.answer, rng)
        examples.append(
            _example("solver", SOLVER_SYSTEM, task.prompt, f"\\boxed{{{guess}}}", guess)
        )
    return examples


def ensure_workflow_start(
    settings: WorkflowPretrainSettings | None = None,
    name: str = MAS_START_NAME,
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """The MAS miniature's starting model, built on first use (minutes on a CPU); `name`
    picks its cache folder (tests build smaller recipes beside the miniature's)."""
    settings = settings or WorkflowPretrainSettings()
    faithful = settings.model_copy(update={"tool_right": 1.0, "reasoner_right": 1.0})
    stages = [(faithful, settings.copy_steps), (settings, settings.steps)]
    return build_start(settings, stages, workflow_examples, name, on_step)


def build_start(
    settings: Any,
    stages: list[tuple[Any, int]],
    examples: Callable[[Any], list[Example]],
    name: str,
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """The tiny model fine-tuned on each stage's `examples(stage_settings)` for its steps, saved
    once into the cache folder `name` and rebuilt when `settings` (its recipe) change.
    `settings` gives the seed and learning rate, each stage its batch size; `on_step(step, loss)`
    follows it."""
    from core.tiny_model import ensure_tiny_model
    from train_backend.pretrain.build import default_pretrained_dir

    base = ensure_tiny_model()
    target = default_pretrained_dir(name)
    recipe = _recipe_record(settings, base)
    return build_once(
        target,
        lambda: _recorded_recipe(target) == recipe,
        lambda: _build(settings, stages, examples, base, target, recipe, on_step),
    )


def _build(
    settings: Any,
    stages: list[tuple[Any, int]],
    examples: Callable[[Any], list[Example]],
    base: Path,
    target: Path,
    recipe: dict[str, Any],
    on_step: Callable[[int, float], None] | None,
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train_backend.pretrain.recipe import PretrainSettings
    from train_backend.pretrain.reply_training import encode_examples, train_on_replies

    with _no_progress_bars():
        torch.manual_seed(settings.seed)
        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base)
        for stage, steps in stages:
            if steps == 0:
                continue
            loop = PretrainSettings(
                steps=steps,
                batch_size=stage.batch_size,
                learning_rate=settings.learning_rate,
                seed=settings.seed,
            )
            rows = encode_examples(tokenizer, examples(stage), loop)
            stop_below = getattr(stage, "stop_below", None)  # a stage that ends once learnt
            train_on_replies(model, rows, loop, tokenizer.pad_token_id, on_step, stop_below)
        _save(model, tokenizer, base, target, recipe)


def _save(model: Any, tokenizer: Any, base: Path, target: Path, recipe: dict[str, Any]) -> None:
    """The model into a folder beside `target`, renamed into place whole (recipe last)."""
    from core.tiny_model import move_into_place

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        for name in ("generation_config.json", "chat_template.jinja"):
            if (base / name).is_file() and not (staging / name).is_file():
                (staging / name).write_bytes((base / name).read_bytes())
        for path in staging.iterdir():
            path.chmod(0o644)
        # The recipe last: a folder is built when it holds this file (is_recorded_build).
        (staging / RECIPE_FILE).write_text(json.dumps(recipe, indent=2) + "\n")
        with contextlib.suppress(FileExistsError):
            move_into_place(staging, target, overwrite=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone once moved; a failed save's remains


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' loading and saving bars off (they would break a command's lines)."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _recipe_record(settings: Any, base: Path) -> dict[str, Any]:
    return {"recipe": settings.model_dump(), "base": str(base)}


def is_recorded_build(folder: Path, settings: Any, base: Path) -> bool:
    """Whether `folder` holds the build of this recipe on `base` (what `build_start` checks)."""
    return _recorded_recipe(folder) == _recipe_record(settings, base)


def _recorded_recipe(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / RECIPE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
