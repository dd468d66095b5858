"""Group filtering before the update (PettingLLMs' `filter_method` / `filter_ratio`).

A step's tree samples fall into groups: the K replies sampled at one state, keyed by (game,
episode, seat, turn) as at_grpo's (the reference's (environment, turn, agent); docs/estimators.md).
`select_in_groups` decides, from each sample's return and group code alone, which samples
the update sees; a dropped sample is left out of the loss altogether (the loss is the mean over
the kept ones), and the estimator runs on the kept rows only (`kept_advantages`). In order:

1. `replay_failed`: a group one of whose branches could not be replayed to the end (its return
   is unknown) is always dropped;
2. `singleton` (`drop_singleton_groups`): a group of one sample;
3. `flat` (`drop_flat_groups`): a group of two or more whose returns are all equal (to rounding,
   `group_ops.FLAT_RTOL`), which at_grpo gives advantages of exactly 0;
4. `group_filter`:
   - `mean`: of the groups still in, the `ratio` share (rounded down) with the lowest mean return;
   - `std`: the share with the lowest spread of returns (population std);
   - `dapo`: every group whose returns have no spread (flat groups and groups of one);
   - `uid`: in each group of two or more still in, the `ratio` share of its samples (rounded
     down) farthest from the group's mean return; the rest of the group stays.
   Ties go to the group that comes first in (game, episode, seat, turn) order, and, within a
   group (`uid`), to the lower return.

Pure numpy; docs/estimators.md ("Group filtering") gives the reference's choices and where this
departs from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import MarsError
from train_backend.group_ops import flat, group_moments

GROUP_FILTERS = ("none", "mean", "std", "dapo", "uid")
GROUP_REASONS = ("replay_failed", "singleton", "flat", "mean", "std", "dapo")
DEFAULT_RATIO = 0.5  # the reference's configs (filter_ratio)


@dataclass(frozen=True)
class GroupFilter:
    """Which groups (and samples) the update leaves out; see the module docstring."""

    method: str = "none"
    ratio: float = DEFAULT_RATIO
    drop_flat: bool = False
    drop_singleton: bool = False

    def __post_init__(self) -> None:
        if self.method not in GROUP_FILTERS:
            raise MarsError(
                f"unknown group_filter {self.method!r}; choose one of: {', '.join(GROUP_FILTERS)}"
            )
        if not 0.0 <= self.ratio <= 1.0:
            raise MarsError(f"group_filter_ratio must be in [0, 1], got {self.ratio}")

    @property
    def active(self) -> bool:
        return self.method != "none" or self.drop_flat or self.drop_singleton

    @classmethod
    def of(cls, config: Any) -> GroupFilter:
        """The settings of a `TrainConfig` (or anything with its four fields)."""
        return cls(
            method=config.group_filter,
            ratio=config.group_filter_ratio,
            drop_flat=config.drop_flat_groups,
            drop_singleton=config.drop_singleton_groups,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "ratio": self.ratio,
            "drop_flat": self.drop_flat,
            "drop_singleton": self.drop_singleton,
        }


@dataclass(frozen=True)
class Selection:
    """The samples kept, and what was dropped for which reason."""

    keep: np.ndarray  # bool per sample
    groups: int
    kept_groups: int  # groups with at least one sample kept
    dropped_groups: dict[str, int] = field(default_factory=dict)  # reason -> whole groups
    dropped_samples: dict[str, int] = field(default_factory=dict)  # reason -> samples

    def metrics(self) -> dict[str, int]:
        out = {
            "group_filter/groups": self.groups,
            "group_filter/kept_groups": self.kept_groups,
            "group_filter/kept_samples": int(self.keep.sum()),
        }
        out.update({f"group_filter/dropped_groups/{k}": v for k, v in self.dropped_groups.items()})
        out.update(
            {f"group_filter/dropped_samples/{k}": v for k, v in self.dropped_samples.items()}
        )
        return out


def _share(count: int, ratio: float) -> int:
    """The reference's int(count * ratio), robust to 0.29 * 100 = 28.999999999999996."""
    return math.floor(count * ratio + 1e-9)


def select_in_groups(
    returns: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
    settings: GroupFilter,
    failed: np.ndarray | None = None,
) -> Selection:
    """Which samples to keep: `returns` and `groups` (codes 0..n_groups-1, every code used) per
    sample, `failed` (optional) marks samples of a branch whose replay failed."""
    returns = np.asarray(returns, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    counts, means, stds = group_moments(returns, groups, n_groups)
    reason = np.full(n_groups, -1, dtype=np.int64)  # index into GROUP_REASONS, -1: kept

    def drop(mask: np.ndarray, name: str) -> None:
        reason[(reason < 0) & mask] = GROUP_REASONS.index(name)

    if failed is not None and np.any(failed):
        failures = np.bincount(groups, weights=np.asarray(failed, float), minlength=n_groups)
        drop(failures > 0, "replay_failed")
    no_spread = flat(means, stds)
    if settings.drop_singleton:
        drop(counts == 1, "singleton")
    if settings.drop_flat:
        drop((counts > 1) & no_spread, "flat")
    if settings.method == "dapo":
        drop(no_spread, "dapo")  # a group of one has no spread either (std 0)
    elif settings.method in ("mean", "std"):
        candidates = np.flatnonzero(reason < 0)
        statistic = (means if settings.method == "mean" else stds)[candidates]
        lowest = candidates[np.lexsort((candidates, statistic))]
        chosen = np.zeros(n_groups, dtype=bool)
        chosen[lowest[: _share(candidates.size, settings.ratio)]] = True
        drop(chosen, settings.method)
    keep = reason[groups] < 0
    dropped_samples: dict[str, int] = {}
    if settings.method == "uid":
        outliers = _farthest_in_groups(returns, groups, counts, means, settings.ratio) & keep
        keep &= ~outliers
        dropped_samples["uid"] = int(outliers.sum())
    per_reason = np.bincount(reason[reason >= 0], minlength=len(GROUP_REASONS))
    sample_reasons = np.bincount(reason[groups][reason[groups] >= 0], minlength=len(GROUP_REASONS))
    used = [i for i, name in enumerate(GROUP_REASONS) if _reported(name, settings, failed)]
    return Selection(
        keep=keep,
        groups=n_groups,
        kept_groups=int(np.unique(groups[keep]).size),
        dropped_groups={GROUP_REASONS[i]: int(per_reason[i]) for i in used},
        dropped_samples={
            **{GROUP_REASONS[i]: int(sample_reasons[i]) for i in used},
            **dropped_samples,
        },
    )


def _reported(reason: str, settings: GroupFilter, failed: np.ndarray | None) -> bool:
    """The reasons that could apply: reported (0 when nothing was dropped for them)."""
    return {
        "replay_failed": failed is not None,
        "singleton": settings.drop_singleton,
        "flat": settings.drop_flat,
    }.get(reason, reason == settings.method)


def _farthest_in_groups(
    returns: np.ndarray, groups: np.ndarray, counts: np.ndarray, means: np.ndarray, ratio: float
) -> np.ndarray:
    """Per sample, whether it is among the `ratio` share (rounded down) of its group's samples
    farthest from the group's mean return (groups of one keep theirs); ties: the lower return."""
    deviation = np.abs(returns - means[groups])
    order = np.lexsort((np.arange(returns.size), returns, -deviation, groups))
    starts = np.cumsum(counts) - counts
    rank = np.empty(returns.size, dtype=np.int64)
    rank[order] = np.arange(returns.size) - starts[groups[order]]
    quota = np.floor(counts * ratio + 1e-9).astype(np.int64)
    quota[counts < 2] = 0
    return rank < quota[groups]


def select_rows(turns: Mapping[str, Any], settings: GroupFilter, failed: Any = None) -> Selection:
    """`select_in_groups` over a table of branches (game, episode, seat, turn, reward; any
    order), groups being at_grpo's (game, episode, seat, turn); `keep` is in the table's order."""
    from train_backend.turn_table import load_branch_table

    table = load_branch_table(turns)
    flags = None if failed is None else np.asarray(failed, dtype=bool)[table.row_of_slot]
    chosen = select_in_groups(table.reward, table.group, table.n_groups, settings, flags)
    keep = np.empty(table.n_rows, dtype=bool)
    keep[table.row_of_slot] = chosen.keep
    return Selection(
        keep=keep,
        groups=chosen.groups,
        kept_groups=chosen.kept_groups,
        dropped_groups=chosen.dropped_groups,
        dropped_samples=chosen.dropped_samples,
    )


BRANCH_COLUMNS = ("game", "episode", "seat", "turn", "reward")


def select_step(rows: Sequence[Mapping[str, Any]], settings: GroupFilter) -> Selection | None:
    """A trainer's selection over its step's branch rows (dicts with BRANCH_COLUMNS, and
    `replay_failed` from a game tree), or None when nothing can be dropped (no filter and no
    failed replay: the step trains on every row, as before group filtering existed)."""
    failed = (
        [bool(row["replay_failed"]) for row in rows]
        if rows and "replay_failed" in rows[0]
        else None
    )
    if not rows or not (settings.active or any(failed or ())):
        return None
    table = {name: [row[name] for row in rows] for name in BRANCH_COLUMNS}
    return select_per_seat(table, settings, failed)


def select_per_seat(
    turns: Mapping[str, Any], settings: GroupFilter, failed: Any = None
) -> Selection:
    """`select_rows` within each seat (role) apart, merged: the reference filters each agent's
    batch, and roles' rewards have scales of their own (ranked together, one role could lose
    most of its groups to another's higher rewards)."""
    seats = np.asarray(turns["seat"])
    flags = None if failed is None else np.asarray(failed, dtype=bool)
    keep = np.zeros(seats.size, dtype=bool)
    groups = kept_groups = 0
    dropped_groups: dict[str, int] = {}
    dropped_samples: dict[str, int] = {}
    for seat in np.unique(seats):
        where = np.flatnonzero(seats == seat)
        table = {name: np.asarray(values)[where] for name, values in turns.items()}
        chosen = select_rows(table, settings, None if flags is None else flags[where])
        keep[where] = chosen.keep
        groups, kept_groups = groups + chosen.groups, kept_groups + chosen.kept_groups
        for totals, counts in ((dropped_groups, chosen.dropped_groups),
                               (dropped_samples, chosen.dropped_samples)):  # fmt: skip
            for reason, count in counts.items():
                totals[reason] = totals.get(reason, 0) + count
    return Selection(keep, groups, kept_groups, dropped_groups, dropped_samples)


def kept_advantages(
    table: Mapping[str, Any], keep: np.ndarray, estimator: str, **options: Any
) -> np.ndarray:
    """`compute_advantages` on the kept rows only (their groups' statistics are theirs); the
    dropped rows get 0 and are left out of the update by the caller."""
    from train_backend.advantage import compute_advantages

    out = np.zeros(keep.size, dtype=np.float64)
    if keep.any():
        subset = {name: np.asarray(values)[keep] for name, values in table.items()}
        out[keep] = compute_advantages(subset, estimator, **options)
    return out


def check_group_filter(config: Any) -> None:
    """Group filtering acts on tree groups: it needs a tree estimator (at_grpo)."""
    from train_backend.advantage import TREE_ESTIMATORS

    settings = GroupFilter.of(config)
    if settings.active and config.estimator not in TREE_ESTIMATORS:
        raise MarsError(
            f"group_filter, drop_flat_groups and drop_singleton_groups act on tree groups: "
            f"they need --estimator {' or '.join(TREE_ESTIMATORS)}, not {config.estimator}"
        )
