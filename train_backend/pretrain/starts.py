"""Start models by name: the tiny model format-pre-trained for the games or a MAS workflow.

A start is a kind (what it teaches), that kind's recipe and a cache folder beside the tiny
model, `tiny-model-v1-format-NAME`:

- `games`: the game reply format (`PretrainSettings`, built by `build`);
- `mas`: the arithmetic miniature's roles, reasoner_tool's tool agent and reasoner and the
  single agent (`WorkflowPretrainSettings`, `mas_start`);
- `plan`: plan_tool's roles on Plan-Path (`PlanPretrainSettings`, `plan_start`);
- `code`: code_tester's coder and tester (`CodePretrainSettings`, `code_start`).

Every build goes through its kind's `ensure_*` and so through `core.files.build_once`: the
folder is checked again under a lock, written beside its place and renamed into it with its
recipe inside, so a folder holding the same recipe is found, never rebuilt, and an interrupted
build leaves nothing that counts as built. `is_built` asks the same question without building
anything (not even the tiny model).

`BUILT_IN` names the starts the CPU miniatures use: `mars tiny-model start NAME` builds one, an
experiment file refers to one as `${model:NAME}` and declares its own under `starts:`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from core.errors import MarsError
from core.names import unknown_name
from core.settings_files import settings_error

KINDS = ("games", "mas", "plan", "code")
# What each built-in start is for, in a few words (the command's help and the docs).
BUILT_IN: dict[str, str] = {
    "tiny_selfplay": "games: Kuhn and Mini Hanabi, the format only (the demo's start)",
    "tiny_mas": "mas: the MAS miniature's start (reasoner_tool and single, copying stage first)",
    "tiny_mas_quick": "mas: the tests' MAS start (one stage of 120 steps, no copying stage)",
    "tiny_plan": "plan: the planning miniature's start (plan_tool on 5x5 Plan-Path)",
    "tiny_code": "code: the code miniature's start (code_tester)",
}
StepHook = Callable[[int, float], None]


def settings_class(kind: str) -> type[BaseModel]:
    """The recipe type of a kind of start."""
    if kind == "games":
        from train_backend.pretrain.recipe import PretrainSettings

        return PretrainSettings
    if kind == "mas":
        from train_backend.pretrain.mas_start import WorkflowPretrainSettings

        return WorkflowPretrainSettings
    if kind == "plan":
        from train_backend.pretrain.plan_start import PlanPretrainSettings

        return PlanPretrainSettings
    if kind == "code":
        from train_backend.pretrain.code_start import CodePretrainSettings

        return CodePretrainSettings
    raise MarsError(unknown_name("kind of start", kind, KINDS))


@dataclass(frozen=True)
class Start:
    """A start model: its kind, its recipe and the cache folder it is built into."""

    kind: str
    settings: BaseModel
    cache_name: str

    @property
    def folder(self) -> Path:
        from train_backend.pretrain.build import default_pretrained_dir

        return default_pretrained_dir(self.cache_name)

    def is_built(self) -> bool:
        """Whether the folder holds this recipe's build (what `build` would find)."""
        from core.tiny_model import default_tiny_model_dir

        base = default_tiny_model_dir()
        if self.kind == "games":
            from train_backend.pretrain.build import is_current_build

            return is_current_build(self.folder, base, self.settings)  # type: ignore[arg-type]
        from train_backend.pretrain.mas_start import is_recorded_build

        return is_recorded_build(self.folder, self.settings, base)

    def steps(self) -> int:
        """Optimizer steps in all (a stage that ends once it is learnt may take fewer)."""
        fields = ("steps", "copy_steps", "tail_steps", "plan_steps")
        return sum(int(getattr(self.settings, name, 0) or 0) for name in fields)

    def build(self, on_step: StepHook | None = None) -> Path:
        """The folder, built first unless it already holds this recipe's build."""
        settings: Any = self.settings
        if self.kind == "games":
            from train_backend.pretrain.build import ensure_pretrained_tiny_model

            return ensure_pretrained_tiny_model(settings, name=self.cache_name, on_step=on_step)
        if self.kind == "mas":
            from train_backend.pretrain.mas_start import ensure_workflow_start

            return ensure_workflow_start(settings, self.cache_name, on_step)
        if self.kind == "plan":
            from train_backend.pretrain.plan_start import ensure_plan_start

            return ensure_plan_start(settings, self.cache_name, on_step)
        from train_backend.pretrain.code_start import ensure_code_start

        return ensure_code_start(settings, self.cache_name, on_step)


def built_in(name: str) -> Start:
    """A built-in start by name (`tiny_mas`, ...); one line for an unknown name."""
    if name not in BUILT_IN:
        raise MarsError(unknown_name("start", name, BUILT_IN))
    kind = BUILT_IN[name].split(":")[0]
    if name == "tiny_selfplay":
        from train_backend.pretrain.recipe import SELFPLAY_START, SELFPLAY_START_NAME

        return Start(kind, SELFPLAY_START, SELFPLAY_START_NAME)
    if kind == "mas":
        from train_backend.pretrain import mas_start

        if name == "tiny_mas_quick":
            return Start(kind, mas_start.QUICK_WORKFLOW_START, mas_start.QUICK_START_NAME)
        return Start(kind, mas_start.WorkflowPretrainSettings(), mas_start.MAS_START_NAME)
    if kind == "plan":
        from train_backend.pretrain.plan_start import PLAN_START_NAME, PlanPretrainSettings

        return Start(kind, PlanPretrainSettings(), PLAN_START_NAME)
    from train_backend.pretrain.code_start import CODE_START_NAME, CodePretrainSettings

    return Start(kind, CodePretrainSettings(), CODE_START_NAME)


def recipe_settings(kind: str, recipe: Mapping[str, Any]) -> BaseModel:
    """A kind's recipe from a mapping of its fields; pydantic's error for a bad one."""
    return settings_class(kind).model_validate(dict(recipe))


def start_with(start: Start, changes: Mapping[str, Any], cache_name: str | None = None) -> Start:
    """`start` with some recipe fields changed (one line for a bad one). A changed recipe gets
    a folder of its own, `cache_name` or the start's followed by a digest of the recipe, so it
    never replaces the start's build."""
    try:
        settings = recipe_settings(start.kind, {**start.settings.model_dump(), **changes})
    except ValidationError as exc:
        raise settings_error(exc, f"{start.kind} start") from None
    if cache_name is None:
        same = settings.model_dump() == start.settings.model_dump()
        cache_name = start.cache_name if same else f"{start.cache_name}-{recipe_digest(settings)}"
    return Start(start.kind, settings, check_cache_name(cache_name))


def declared(kind: str, settings: BaseModel, cache_name: str) -> Start:
    """A start an experiment declares: in a built-in start's folder when it is that start's
    recipe (found there when built, e.g. by `mars tiny-model start`), else in `cache_name`."""
    for name, what in BUILT_IN.items():
        if what.split(":")[0] != kind:
            continue
        known = built_in(name)
        if known.settings.model_dump() == settings.model_dump():
            return known
    return Start(kind, settings, check_cache_name(cache_name))


def recipe_digest(settings: BaseModel) -> str:
    text = json.dumps(settings.model_dump(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def check_cache_name(name: str) -> str:
    """A cache folder's name part: letters, digits, `_` and `-`, not starting with `.`."""
    if not name or name[0] in ".-" or any(not (c.isalnum() or c in "_-") for c in name):
        raise MarsError(f"start name {name!r}: use letters, digits, _ and - (a folder name)")
    return name
