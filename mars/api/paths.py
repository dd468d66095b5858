"""A plan's path fields given as text (`out="runs/notebook"`) made `Path`s."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypeVar

Plan = TypeVar("Plan")


def with_paths(plan: Plan) -> Plan:
    """`plan` with every field declared a `Path` that holds a `str` turned into a `Path`."""
    changes = {
        spec.name: Path(value)
        for spec in dataclasses.fields(plan)  # type: ignore[arg-type]
        if "Path" in str(spec.type) and isinstance(value := getattr(plan, spec.name), str)
    }
    return dataclasses.replace(plan, **changes) if changes else plan  # type: ignore[type-var]
