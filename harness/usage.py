"""Usage accounting per role (agent name in a MAS, seat in a game), aggregated over a run."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.endpoint import Completion


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
