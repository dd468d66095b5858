"""Confidence intervals for accuracies, returns and paired differences; per-question reducers.

With several attempts per question (epochs), attempts at one question are not independent: a
model that knows the answer tends to get it every time. `clustered_wilson_ci` accounts for that
(see docs/benchmarks.md, "Summary statistics"); `majority_correct` (maj@k) and `pass_at_k`
reduce a question's attempts to one number.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads when a bootstrap runs: an eval's start-up does not wait for it
    import numpy as np


def wilson_ci(successes: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 0) for n = 0.

    Fractional counts are allowed (an effective sample size, `clustered_wilson_ci`)."""
    if n <= 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, data.size, size=(n_boot, data.size))
    means = data[idx].mean(axis=1)
    alpha = (1 - level) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


def paired_bootstrap_diff(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean of b - a over paired items, with a percentile bootstrap 95% interval."""
    import numpy as np

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError("paired samples must have the same length")
    diff = y - x
    if diff.size == 0:
        return (0.0, 0.0, 0.0)
    lo, hi = bootstrap_mean_ci(diff, n_boot=n_boot, seed=seed)
    return (float(diff.mean()), lo, hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples with c correct (Chen et al. 2021):
    1 - C(n - c, k) / C(n, k), the chance that k of the n samples drawn without replacement
    hold at least one correct one. Needs 1 <= k <= n."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs between 1 and {n} samples per question")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@dataclass(frozen=True)
class ClusteredInterval:
    low: float
    high: float
    effective_n: float  # attempts' worth of independent information
    clustered: bool  # False when every question has one attempt (plain Wilson)


def clustered_wilson_ci(
    correct: Sequence[int], attempts: Sequence[int], z: float = 1.96
) -> ClusteredInterval | None:
    """95% interval of an accuracy over questions with several attempts each (None: no attempt).

    `correct[i]` of `attempts[i]` attempts at question i were right. The accuracy is
    sum(correct) / sum(attempts). Its variance is the cluster-robust (CR1) variance of that ratio,
    clustered by question; the design effect turns the attempts into an effective sample size,
    n_eff = p(1 - p) / variance, kept between the number of questions and the number of attempts,
    and the interval is Wilson's at n_eff. With one attempt per question this is exactly the
    Wilson interval; when every question is all-right or all-wrong (p(1 - p) = 0 or a zero
    variance) n_eff is the number of questions.
    """
    pairs = [(int(c), int(m)) for c, m in zip(correct, attempts, strict=True) if m > 0]
    total = sum(m for _, m in pairs)
    if total == 0:
        return None
    questions = len(pairs)
    p = sum(c for c, _ in pairs) / total
    if questions == total:
        low, high = wilson_ci(p * total, total, z)
        return ClusteredInterval(low, high, float(total), clustered=False)
    effective = float(questions)
    if questions > 1 and 0.0 < p < 1.0:
        residuals = sum((c - p * m) ** 2 for c, m in pairs)
        variance = questions / (questions - 1) * residuals / (total * total)
        if variance > 0:
            effective = min(float(total), max(float(questions), p * (1 - p) / variance))
    low, high = wilson_ci(p * effective, effective, z)
    return ClusteredInterval(low, high, effective, clustered=True)


@dataclass(frozen=True)
class Attempt:
    """One graded attempt at a question: its epoch, extracted answer and grade."""

    epoch: int
    extracted: str | None
    correct: bool


_CORRECT = ("correct",)  # the vote of every correct answer (they are all equal to the gold)


def majority_correct(attempts: Sequence[Attempt]) -> bool:
    """maj@k (self-consistency): is the most frequent extracted answer the right one?

    Votes: attempts with an extracted answer (extraction failures do not vote). All correct
    answers are one answer (each equals the gold); a wrong answer is its extracted text with
    runs of spaces collapsed. A tie between the most frequent answers goes to the one given first
    (lowest epoch). No vote at all counts as wrong.
    """
    counts: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    for attempt in attempts:
        if attempt.extracted is None:
            continue
        vote: Hashable = _CORRECT if attempt.correct else " ".join(attempt.extracted.split())
        counts[vote] = counts.get(vote, 0) + 1
        first[vote] = min(first.get(vote, attempt.epoch), attempt.epoch)
    if not counts:
        return False
    winner = min(counts, key=lambda vote: (-counts[vote], first[vote]))
    return winner == _CORRECT
