"""Usage accounting per role (agent name in a MAS, seat in a game), aggregated over a run and
added up over the attempts of a resumed run (`accumulate_usage_file`)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.files import write_json_atomic

if TYPE_CHECKING:
    from core.endpoint import Completion


@dataclass
class RoleUsage:
    calls: int = 0
    cached: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    latency_s: float = 0.0


class UsageLedger:
    def __init__(self) -> None:
        self._roles: dict[str, RoleUsage] = defaultdict(RoleUsage)

    def add(self, role: str, completion: Completion) -> None:
        usage = self._roles[role]
        usage.calls += 1
        usage.cached += int(completion.cached)
        usage.retries += completion.retries
        usage.prompt_tokens += completion.usage.prompt_tokens
        usage.completion_tokens += completion.usage.completion_tokens
        usage.reasoning_tokens += completion.usage.reasoning_tokens or 0
        usage.latency_s += completion.latency_s

    def add_error(self, role: str, *, retries: int) -> None:
        usage = self._roles[role]
        usage.errors += 1
        usage.retries += retries

    def by_role(self) -> dict[str, dict[str, float]]:
        return {role: asdict(usage) for role, usage in sorted(self._roles.items())}

    def totals(self) -> dict[str, float]:
        total = RoleUsage()
        for usage in self._roles.values():
            for name, value in asdict(usage).items():
                setattr(total, name, getattr(total, name) + value)
        return asdict(total)


def add_usage(previous: Any, current: Any) -> Any:
    """`current` with the numbers of `previous` added, key by key at every depth (a key in only
    one of them is kept as it is). Used so usage files add up over a run's attempts."""
    if isinstance(previous, dict) and isinstance(current, dict):
        merged = dict(previous)
        for key, value in current.items():
            merged[key] = add_usage(previous.get(key), value) if key in previous else value
        return merged
    numbers = (int, float)
    if (
        isinstance(previous, numbers)
        and isinstance(current, numbers)
        and not isinstance(previous, bool)
        and not isinstance(current, bool)
    ):
        return previous + current
    return current


def accumulate_usage_file(path: Path, usage: dict[str, Any]) -> dict[str, Any]:
    """Add this attempt's `usage` to what `path` holds (a resumed run's earlier attempts) and
    write the sum atomically; `attempts` counts the attempts added up. Returns the sum."""
    previous: Any = None
    try:
        previous = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        previous = None  # a first attempt, or an unreadable file (it is replaced)
    total = add_usage(previous if isinstance(previous, dict) else {}, {**usage, "attempts": 1})
    write_json_atomic(Path(path), total)
    return total
