"""What a run's summary.json holds, typed once: the commands write these, and the loop (its
learning-curve rows) and the dashboard (its tables) read them.

Readers name the fields they keep with `fields(Schema, ...)`, so a field that is renamed or
misspelt fails at import instead of reading as a silent None; `tests/test_summaries.py` checks
that the summaries the commands really write hold only fields declared here.
"""

from __future__ import annotations

from typing import Any, TypedDict

Interval = list[float]  # [low, high]


class RoleComputeFigures(TypedDict):
    """One agent role's tokens and calls per graded attempt of a suite (0 where an attempt did
    not call it), so the roles add up to the suite's means."""

    tokens: float  # prompt + completion
    completion_tokens: float
    llm_calls: float


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
    mean_tokens: float | None  # prompt + completion tokens per graded attempt
    mean_completion_tokens: float | None
    mean_llm_calls: float | None
    mean_by_role: dict[str, RoleComputeFigures]  # each agent role's share of the means above
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


class MatchedSuiteFigures(TypedDict, total=False):
    """One suite of a compute-matched baseline (`harness.compute_match`): the MAS run's compute
    per question, the k chosen for it, and what the baseline spent."""

    mas_tokens_per_question: float  # the MAS run's prompt + completion tokens per attempt
    mas_completion_tokens_per_question: float
    mas_calls_per_question: float
    sample_tokens: float | None  # the single agent's tokens per sample, from its first epoch
    k: int  # samples per question (the epochs of this suite), majority-voted
    k_if_completion_matched: int  # the k that matching completion tokens alone would give
    tokens_per_question: float | None  # the baseline's own, over its k samples
    completion_tokens_per_question: float | None
    calls_per_question: float | None
    ratio: float | None  # tokens_per_question / mas_tokens_per_question
    completion_ratio: float | None


class ComputeMatchFigures(TypedDict, total=False):
    """What a `mars eval --match-compute RUN` baseline matched (run.json's config holds the
    same, without the baseline's own figures)."""

    run: str  # the MAS eval run's directory
    mas: str
    model: str | None
    matched_on: str  # "tokens": prompt + completion tokens per question
    suites: dict[str, MatchedSuiteFigures]


class EvalSummary(TypedDict, total=False):
    schema_version: int
    suites: dict[str, SuiteFigures]
    compute_match: ComputeMatchFigures  # only for `mars eval --match-compute RUN`
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
    parse_mode: str | None  # how replies were read: lenient or strict (games/parsing.py)
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
