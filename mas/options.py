"""Reading a MAS's `config` dict: wrong types or values are the user's error (MarsError)."""

from __future__ import annotations

from typing import Any

from core.errors import MarsError


def int_option(config: dict[str, Any], key: str, default: int, *, minimum: int = 1) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MarsError(f"MAS option '{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def seconds_option(config: dict[str, Any], key: str, default: float) -> float:
    """A positive number of seconds (an int or a float)."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise MarsError(f"MAS option '{key}' must be a positive number of seconds, got {value!r}")
    return float(value)


def bool_option(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise MarsError(f"MAS option '{key}' must be true or false, got {value!r}")
    return value


def str_option(config: dict[str, Any], key: str, default: str) -> str:
    value = config.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise MarsError(f"MAS option '{key}' must be a non-empty string, got {value!r}")
    return value


PROTOCOLS = ("default", "maslab")


def protocol_option(config: dict[str, Any], allowed: tuple[str, ...] = ()) -> str:
    """`protocol`: "default" (this project's version) or "maslab" (MASLab's). With "maslab",
    only the options in `allowed` (plus `protocol`) may be set: the others belong to the
    default protocol and would be silently ignored."""
    value = config.get("protocol", "default")
    if value not in PROTOCOLS:
        raise MarsError(
            f"MAS option 'protocol' must be one of {', '.join(PROTOCOLS)}, got {value!r}"
        )
    if value == "maslab":
        stray = sorted(set(config) - {"protocol", *allowed})
        if stray:
            usable = ", ".join(allowed) or "none"
            raise MarsError(
                f"MAS option {', '.join(repr(k) for k in stray)} does not apply with "
                f"protocol=maslab (usable: {usable})"
            )
    return str(value)
