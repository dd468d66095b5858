"""What a run's summary.json holds, typed once: the commands write these, and the loop (its
learning-curve rows) and the dashboard (its tables) read them.

Readers name the fields they keep with `fields(Schema, ...)`, so a field that is renamed or
misspelt fails at import instead of reading as a silent None; `tests/test_summaries.py` checks
that the summaries the commands really write hold only fields declared here.
"""

from __future__ import annotations

from typing import Any, TypedDict

Interval = list[float]  # [low, high]


class SuiteFigures(TypedDict, total=False):
    """One suite of `mars eval` (`harness.evaluation.summarize`)."""

    n: int
    correct: int
    accuracy: float | None
    ci95: Interval | None
    ci_method: str | None
    effective_n: float | None
    extraction_failure_rate: float | None
    errors: int
    first_error: str
    samples: int
    epochs: int
    mean_tokens: float | None
    mean_llm_calls: float | None
    mean_latency_s: float | None
    mean_at_k: float
    maj_at_k: float
    maj_at_k_ci95: Interval
    pass_at_k: float
    pass_at: dict[str, float]
    source: str  # where the samples came from: the hub id, or the local file and its root


class RoleUsageFigures(TypedDict, total=False):
    """One agent role's calls in `mars eval` (usage.json's `roles`, added up over attempts)."""

    model: str  # the model name that answered it (comma-separated when several did)
    calls: int
    cached: int
    errors: int
    retries: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    latency_s: float


class ReplicaUsageFigures(TypedDict, total=False):
    """One server of several replicas behind `--base-url URL1,URL2` (usage.json's `replicas`)."""

    calls: int  # requests it answered
    failures: int  # attempts that failed there (each retried, there or on another replica)
    prompt_tokens: int
    completion_tokens: int
    latency_s: float  # summed over its calls
    mean_latency_s: float


class EvalSummary(TypedDict, total=False):
    schema_version: int
    suites: dict[str, SuiteFigures]
    usage_by_role: dict[str, RoleUsageFigures]
    usage_by_replica: dict[str, ReplicaUsageFigures]  # only with several --base-url replicas
    wall_s: float
    client_cpu_s: float
    malformed_lines: int


class SeatFigures(TypedDict, total=False):
    """One seat of `mars arena` (`games.arena.summarize`)."""

    n: int
    win: float | None
    draw: float | None
    loss: float | None
    win_ci: Interval | None
    draw_ci: Interval | None
    loss_ci: Interval | None
    mean_return: float | None
    mean_return_ci: Interval | None
    normalized_return: float | None
    normalized_return_ci: Interval | None
    mean_reward: float | None
    invalid_rate: float | None
    invalid_episode_rate: float | None
    invalid_episode_rate_ci: Interval | None
    mean_tokens_per_turn: float | None
    model_turns: int
    errors: int
    first_error: str


class ArenaSummary(TypedDict, total=False):
    schema_version: int
    game: str
    variant_of: str  # an obfuscated variant's original game (games/variants/)
    player: str
    opponent: str
    player_id: str
    opponent_id: str
    normalization: dict[str, Any]
    rules: dict[str, Any]
    seats: dict[str, SeatFigures]
    model: str
    usage: dict[str, Any]
    usage_by_model: dict[str, Any]
    wall_s: float


class ExploitabilitySummary(TypedDict, total=False):
    """`mars exploitability` (`games.exploitability.summarize`)."""

    schema_version: int
    game: str
    variant_of: str  # an obfuscated variant's original game
    player: str
    model: str | None
    exploitability: float | None
    ci95: Interval | None
    nash_conv: float | None
    nash_conv_ci95: Interval | None
    uniform_exploitability: float
    exact: bool
    samples: int | None
    temperature: float | None
    prompt_style: str | None
    bootstrap_resamples: int
    states: int
    replies: int
    invalid: int
    invalid_rate: float | None
    states_without_valid_reply: int
    action_shares: dict[str, dict[str, float]]
    errors: int
    first_error: str
    usage: dict[str, Any]
    wall_s: float


def fields(schema: type, *names: str) -> tuple[str, ...]:
    """`names`, each checked to be a field of `schema`."""
    unknown = sorted(set(names) - set(schema.__annotations__))
    if unknown:
        raise TypeError(f"{schema.__name__} has no field {', '.join(unknown)}")
    return names
