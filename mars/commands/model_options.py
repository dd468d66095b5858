"""The model and sampling options as command-line options, for every command that talks to a model.

A command declares a parameter typed `ModelOptions` (or `SamplingOptions`) and is decorated with
`@model_options(...)`: each field of the group becomes one option of the command (its flag, help
and bounds from `core.model_options`), and the command receives the group as one object. A
command may change a default or a help line, or rename a flag (`mars failures --judge-model`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import typer

from core.model_options import ModelOptions, SamplingOptions

GROUPS = {ModelOptions: "Model", SamplingOptions: "Sampling"}  # each group's panel in --help
Command = TypeVar("Command", bound=Callable[..., Any])


def _typer_option(
    spec: dataclasses.Field, default: Any, flag: str, help: str, panel: str, hidden: bool
) -> Any:
    bounds = {key: spec.metadata[key] for key in ("min", "max") if spec.metadata[key] is not None}
    return typer.Option(default, flag, help=help, rich_help_panel=panel, hidden=hidden, **bounds)


def model_options(
    *,
    defaults: dict[str, Any] | None = None,
    helps: dict[str, str] | None = None,
    flags: dict[str, str] | None = None,
    hidden: Collection[str] = (),
) -> Callable[[Command], Command]:
    """Expand the command's `ModelOptions` / `SamplingOptions` parameters into options.

    `defaults`, `helps` and `flags` are keyed by field name: this command's own default, help
    line or flag for that option; `hidden` names options kept out of its `--help`.
    """
    defaults, helps, flags = defaults or {}, helps or {}, flags or {}

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        groups = {
            name: p.annotation for name, p in signature.parameters.items() if p.annotation in GROUPS
        }
        known = {spec.name for group in groups.values() for spec in dataclasses.fields(group)}
        unknown = (set(defaults) | set(helps) | set(flags) | set(hidden)) - known
        if not groups or unknown:
            raise TypeError(f"{command.__name__}: no option group, or unknown options {unknown}")
        parameters = []
        for name, parameter in signature.parameters.items():
            if name not in groups:
                parameters.append(parameter)
                continue
            hints = typing.get_type_hints(groups[name])
            for spec in dataclasses.fields(groups[name]):
                default = _typer_option(
                    spec,
                    defaults.get(spec.name, spec.default),
                    flags.get(spec.name, spec.metadata["flag"]),
                    helps.get(spec.name, spec.metadata["help"]),
                    GROUPS[groups[name]],
                    spec.name in hidden,
                )
                parameters.append(
                    inspect.Parameter(
                        spec.name,
                        inspect.Parameter.KEYWORD_ONLY,
                        default=default,
                        annotation=hints[spec.name],
                    )
                )

        @functools.wraps(command)
        def with_groups(**kwargs: Any) -> Any:
            for name, group in groups.items():
                values = {spec.name: kwargs.pop(spec.name) for spec in dataclasses.fields(group)}
                kwargs[name] = group(**values)
            return command(**kwargs)

        parameters.sort(key=lambda p: p.kind)  # keyword-only after the rest, as Python wants
        with_groups.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_groups.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_groups  # type: ignore[return-value]

    return decorate
