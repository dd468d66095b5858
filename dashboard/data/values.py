"""Reading loosely typed values from run files: a bad or missing value is None, never an error."""

from __future__ import annotations

import math
from typing import Any


def as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def as_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def as_text(value: Any) -> str | None:
    return None if value is None else str(value)


def ci_bounds(value: Any) -> tuple[float | None, float | None]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return as_float(value[0]), as_float(value[1])
    return None, None
