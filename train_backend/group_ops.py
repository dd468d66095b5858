"""Vectorised building blocks of the advantage estimators: grouped statistics, per-turn returns.

Groups are given as integer codes 0..n_groups-1 (every code used at least once). Sums run through
`np.bincount`, so every function is a handful of passes over the data whatever the number of groups.
"""

from __future__ import annotations

import numpy as np

SCALES = ("mean", "mean_std")
# A group whose values agree to this (relative; absolute below 1) is flat: all of them are equal
# but for floating-point rounding (0.1 + 0.2 against 0.3), and its centred values are exactly 0.
FLAT_RTOL = 1e-12


def group_moments(
    values: np.ndarray, groups: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: the number of values, their mean and their population std."""
    counts = np.bincount(groups, minlength=n_groups)
    sizes = np.maximum(counts, 1).astype(np.float64)
    means = np.bincount(groups, weights=values, minlength=n_groups) / sizes
    centred = values - means[groups]
    stds = np.sqrt(np.bincount(groups, weights=centred * centred, minlength=n_groups) / sizes)
    return counts, means, stds


def flat(means: np.ndarray, stds: np.ndarray) -> np.ndarray:
    """Whether each group's values are all equal, to rounding (FLAT_RTOL)."""
    return stds <= FLAT_RTOL * np.maximum(1.0, np.abs(means))


def is_flat(values: np.ndarray | list[float]) -> bool:
    """Whether one group's values are all equal, to rounding (a group of one is flat)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size <= 1:
        return True
    return bool(flat(np.array([array.mean()]), np.array([array.std()]))[0])


def normalise_in_groups(
    values: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
    *,
    scale: str,
    eps: float,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Centre `values` on their group mean and, for scale "mean_std", divide by the group std.

    The std is the population one (ddof=0), so a normalised group has std exactly 1. With `weights`
    both moments are weighted. Edge rules: a group of a single value gives 0 (not the raw value), a
    flat group (its values equal to rounding, `FLAT_RTOL`) gives exactly 0 (subtracting a mean
    computed in floating point would leave residues like -1.4e-17 on [0.1, 0.1, 0.1]), and a group
    whose std is below `eps` is only centred, never divided by a near-zero number.
    """
    counts = np.bincount(groups, minlength=n_groups)
    if weights is None:
        weight_sums = counts.astype(np.float64)
        means = np.bincount(groups, weights=values, minlength=n_groups) / weight_sums
    else:
        weight_sums = np.bincount(groups, weights=weights, minlength=n_groups)
        means = np.bincount(groups, weights=values * weights, minlength=n_groups) / weight_sums
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}")
    centred = values - means[groups]
    squares = centred * centred if weights is None else weights * centred * centred
    stds = np.sqrt(np.bincount(groups, weights=squares, minlength=n_groups) / weight_sums)
    if scale == "mean_std":
        divisors = np.where(stds < eps, 1.0, stds)
        centred /= divisors[groups]
    # Weighted means need not reproduce a lone value bit for bit, so zero singletons explicitly;
    # a flat group's residues of the rounded mean are zeroed the same way.
    centred[(counts == 1)[groups] | flat(means, stds)[groups]] = 0.0
    return centred


def suffix_returns(
    rewards: np.ndarray, starts: np.ndarray, lengths: np.ndarray, gamma: float
) -> np.ndarray:
    """Per-turn returns G_k = r_k + gamma * G_{k+1} within each trajectory (G past the end is 0).

    `rewards` is in slot order: trajectory after trajectory, turns ascending. The loop runs once per
    turn depth (at most 25 per seat in the paper's games, whose episodes have 50 actions at most),
    each pass vectorised over every trajectory still that long. Each trajectory is summed on its
    own, back to front, so two trajectories with the same rewards get bit-identical returns
    wherever they sit in the batch (the "distinct values" step of marshal_reference relies on it).
    """
    returns = rewards.astype(np.float64, copy=True)
    if lengths.size == 0:
        return returns
    longest_first = np.argsort(-lengths, kind="stable")
    starts_desc = starts[longest_first]
    negated_lengths = -lengths[longest_first]  # ascending, for searchsorted
    for depth in range(int(lengths.max()) - 2, -1, -1):
        # trajectories with a turn after `depth` are exactly those longer than depth + 1
        n_longer = int(np.searchsorted(negated_lengths, -(depth + 1), side="left"))
        here = starts_desc[:n_longer] + depth
        returns[here] += gamma * returns[here + 1]
    return returns


DISTINCT_RTOL = 1e-6


def subtract_mean_of_distinct(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Subtract from each value the mean of the *distinct* values of its group.

    Equal values count once: in a group holding [1, 1, 1, 2, 4] the baseline is (1+2+4)/3, not
    9/5. This mirrors the agent-specific step of the MARSHAL code, which takes the unique values.
    Values within DISTINCT_RTOL (relative, absolute near 0) of the previous one count as equal:
    returns that are equal in exact arithmetic differ in the last bits depending on whether the
    rewards arrived as float32 (verl's reward tensors) or float64, and an exact test would then
    count them once on one path and twice on the other.
    """
    if values.size == 0:
        return values.astype(np.float64, copy=True)
    order = np.lexsort((values, groups))
    sorted_values = values[order]
    sorted_groups = groups[order]
    first_of_run = np.ones(values.size, dtype=bool)
    step = np.abs(sorted_values[1:] - sorted_values[:-1])
    tolerance = DISTINCT_RTOL * np.maximum(1.0, np.abs(sorted_values[1:]))
    first_of_run[1:] = (step > tolerance) | (sorted_groups[1:] != sorted_groups[:-1])
    distinct_groups = sorted_groups[first_of_run]
    distinct_sums = np.bincount(
        distinct_groups, weights=sorted_values[first_of_run], minlength=n_groups
    )
    distinct_counts = np.bincount(distinct_groups, minlength=n_groups)
    baselined = values - (distinct_sums / distinct_counts)[groups]
    baselined[(distinct_counts == 1)[groups]] = 0.0  # one distinct value: exactly 0, as flat
    return baselined
