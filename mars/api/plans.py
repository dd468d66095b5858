"""Plans from keyword arguments: `mars.evaluate(suites="gsm8k", model="m", base_url=URL)`.

Every API function takes one typed plan (a frozen dataclass) or the keyword arguments that build
it. A plan's own fields are given by name; so are the fields of the model and sampling options
(`model`, `base_url`, `concurrency`, ..., `temperature`, `max_tokens`, `seed`), which land in the
plan's `model_options` and `sampling`. Anything else is one line naming the closest field.
A path may be given as text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions
from core.names import comma_list, unknown_name

Plan = TypeVar("Plan")

_GROUPS = {"model_options": ModelOptions, "sampling": SamplingOptions}


def build_plan(plan_type: type[Plan], plan: Plan | None, kwargs: dict[str, Any]) -> Plan:
    """`plan` as given, or one built from `kwargs` (not both). A first argument that is not a
    plan is the plan's first field: `mars.experiment("marshal-mini", dry_run=True)`."""
    if plan is not None and not isinstance(plan, plan_type):
        first = dataclasses.fields(plan_type)[0].name  # type: ignore[arg-type]
        if first in kwargs:
            raise MarsError(f"{plan_type.__name__}: {first} is given twice")
        plan, kwargs = None, {first: plan, **kwargs}
    if plan is not None:
        if kwargs:
            raise MarsError(f"give a {plan_type.__name__} or keyword arguments, not both")
        return _recorded(_check_bounds(_with_paths(plan)))
    own = {field.name for field in dataclasses.fields(plan_type)}  # type: ignore[arg-type]
    groups = {name: group for name, group in _GROUPS.items() if name in own}
    grouped: dict[str, dict[str, Any]] = {name: {} for name in groups}
    plain: dict[str, Any] = {}
    for key, value in kwargs.items():
        group = next(
            (name for name, cls in groups.items() if key in _field_names(cls) and key not in own),
            None,
        )
        if group is not None:
            grouped[group][key] = value
        elif key in own:
            plain[key] = value
        else:
            known = sorted(own | {n for cls in groups.values() for n in _field_names(cls)})
            raise MarsError(f"{plan_type.__name__}: {unknown_name('argument', key, known)}")
    for name, values in grouped.items():
        if values:
            base = plain.get(name) or _default(plan_type, name)
            plain[name] = dataclasses.replace(base, **values)
    return _recorded(_check_bounds(_with_paths(plan_type(**plain))))


# Each plan's function, for the call a run.json records.
_FUNCTIONS = {
    "EvalPlan": "evaluate",
    "ArenaPlan": "arena",
    "SelfplayPlan": "selfplay",
    "ExploitabilityPlan": "exploitability",
    "TrainPlan": "train",
    "TrainMasPlan": "train_mas",
    "LoopPlan": "loop",
    "ExperimentPlan": "experiment",
    "FailuresPlan": "failures",
}


def _recorded(plan: Plan) -> Plan:
    """Note the library call that is starting a run, for its run.json
    (`core.lifecycle.invocation`; the `mars` program records its own command line instead)."""
    from core.lifecycle import LIBRARY_CALL

    function = _FUNCTIONS.get(type(plan).__name__, "api")
    LIBRARY_CALL.set(["python", "-c", f"import mars; mars.{function}(mars.{plan!r})"])
    return plan


def _check_bounds(plan: Plan) -> Plan:
    """The model and sampling options' bounds (declared on their fields, the command line's
    own `min`/`max`): a value out of range is one line naming the option."""
    for name in _GROUPS:
        group = getattr(plan, name, None)
        if group is None:
            continue
        for spec in dataclasses.fields(group):
            value, low, high = (
                getattr(group, spec.name),
                spec.metadata.get("min"),
                spec.metadata.get("max"),
            )
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if (low is not None and value < low) or (high is not None and value > high):
                bounds = " and ".join(
                    part
                    for part in (
                        f"at least {low}" if low is not None else "",
                        f"at most {high}" if high is not None else "",
                    )
                    if part
                )
                raise MarsError(f"{spec.metadata['flag']} must be {bounds}, not {value}")
    return plan


def _with_paths(plan: Plan) -> Plan:
    """`plan` with every field declared a `Path` that holds text (`out="runs/nb"`) a `Path`."""
    changes = {
        spec.name: Path(value)
        for spec in dataclasses.fields(plan)  # type: ignore[arg-type]
        if "Path" in str(spec.type) and isinstance(value := getattr(plan, spec.name), str)
    }
    return dataclasses.replace(plan, **changes) if changes else plan  # type: ignore[type-var]


def _default(plan_type: type, name: str) -> Any:
    """The plan's own default of a field (a plan may set its own sampling defaults)."""
    field = next(f for f in dataclasses.fields(plan_type) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _field_names(cls: type) -> set[str]:
    return {field.name for field in dataclasses.fields(cls)}


def names(value: str | Sequence[str] | None, flag: str) -> tuple[str, ...]:
    """A list of names as text (`a,b`) or as a sequence; duplicates refused in one line."""
    if value is None:
        return ()
    text = value if isinstance(value, str) else ",".join(str(item) for item in value)
    return tuple(comma_list(text, flag))


def loggers(value: str | Sequence[str] | None) -> list[str] | None:
    """Trackers as text (`wandb,tensorboard`) or a sequence, checked (an unknown name, or one
    whose package is missing, is one line); None: not given, the config decides."""
    if value is None:
        return None
    from core.trackers import check_loggers

    items = value.split(",") if isinstance(value, str) else list(value)
    return list(check_loggers(items, flag="--logger"))
