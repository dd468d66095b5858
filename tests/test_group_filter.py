"""Group filtering (PettingLLMs' filter_method / filter_ratio) and flat groups, as pure functions:
every method by hand on six groups, the rounding of the share, the order of the rows, failed
replays, and flat groups whose advantages are exactly 0."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.errors import MarsError
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig, load_train_config
from train_backend.group_filter import (
    GroupFilter,
    check_group_filter,
    kept_advantages,
    select_in_groups,
    select_rows,
    select_step,
)
from train_backend.group_ops import normalise_in_groups, subtract_mean_of_distinct

# Six groups (codes 0-5) of returns, in this row order:
#   g0 [1, 1, 1] flat, mean 1 | g1 [0, 2] mean 1, std 1 | g2 [5] one sample
#   g3 [-1, 0, 4] mean 1, std 2.16 | g4 [0, 0] flat, mean 0 | g5 [3, 4, 5, 6] mean 4.5, std 1.12
RETURNS = np.array([1, 1, 1, 0, 2, 5, -1, 0, 4, 0, 0, 3, 4, 5, 6], dtype=float)
GROUPS = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 4, 4, 5, 5, 5, 5])
ROWS_OF = {code: np.flatnonzero(np.equal(GROUPS, code)) for code in range(6)}


def dropped_groups(keep: np.ndarray) -> set[int]:
    return {g for g, rows in ROWS_OF.items() if not keep[rows].any()}


def select(**settings) -> np.ndarray:
    return select_in_groups(RETURNS, GROUPS, 6, GroupFilter(**settings)).keep


# ---- flat groups give exactly 0 ------------------------------------------------------------


@pytest.mark.parametrize("value", [0.1, 1 / 3, 0.7, -2.2])
@pytest.mark.parametrize("size", [3, 5, 7])
@pytest.mark.parametrize("scale", ["mean", "mean_std"])
def test_a_flat_group_is_exactly_zero_not_a_rounding_residue(value, size, scale) -> None:
    values = np.full(size, value)
    centred = normalise_in_groups(values, np.zeros(size, int), 1, scale=scale, eps=1e-6)
    assert not centred.any()  # [0.1] * 3 used to give -1.4e-17 each
    # equal in exact arithmetic, not in floating point: 0.1 + 0.2 against 0.3
    mixed = np.array([0.1 + 0.2, 0.3, 0.3])
    assert not normalise_in_groups(mixed, np.zeros(3, int), 1, scale=scale, eps=1e-6).any()


def test_flat_tree_groups_and_seats_are_exactly_zero_in_every_estimator() -> None:
    branches = {
        "game": ["g"] * 6,
        "episode": [0] * 6,
        "seat": [0] * 6,
        "turn": [0, 0, 0, 1, 1, 1],
        "reward": [0.1, 0.1, 0.1, 1 / 3, 1 / 3, 1 / 3],
    }
    for scale in ("mean", "mean_std", "state_std"):
        table = {**branches, "state": ["a", "a", "a", "b", "b", "b"]}
        assert not compute_advantages(table, "at_grpo", scale=scale).any()
    turns = {  # three one-turn trajectories per seat, all 0.1
        "game": ["g"] * 6,
        "episode": [0, 1, 2, 0, 1, 2],
        "seat": [0, 0, 0, 1, 1, 1],
        "turn": [0] * 6,
        "reward": [0.1] * 6,
    }
    for estimator in ("marshal", "no_turn_level", "no_agent_norm", "grpo"):
        assert not compute_advantages(turns, estimator).any()
    values = np.array([0.1, 0.1 * (1 + 1e-9), 2.0, 3.0])  # one distinct value in group 0
    baselined = subtract_mean_of_distinct(values, np.array([0, 0, 1, 1]), 2)
    assert not baselined[:2].any() and baselined[2:].tolist() == [-0.5, 0.5]
    # a real spread is still kept, however small (the eps rule only stops the division)
    spread = normalise_in_groups(
        np.array([0.3, 0.3 + 1e-9]), np.zeros(2, int), 1, scale="mean_std", eps=1e-6
    )
    assert spread == pytest.approx([-5e-10, 5e-10], abs=1e-15)


# ---- each method by hand -------------------------------------------------------------------


def test_nothing_is_dropped_without_a_filter() -> None:
    assert select().all()
    assert (
        select_step([{"game": "g", "episode": 0, "seat": 0, "turn": 0, "reward": 1}], GroupFilter())
        is None
    )


def test_singleton_flat_and_dapo_groups() -> None:
    assert dropped_groups(select(drop_singleton=True)) == {2}
    assert dropped_groups(select(drop_flat=True)) == {0, 4}  # a group of one is not "flat"
    assert dropped_groups(select(method="dapo")) == {0, 2, 4}  # no spread, one sample included


def test_mean_drops_the_share_of_groups_with_the_lowest_mean_ties_in_group_order() -> None:
    # means 1, 1, 5, 1, 0, 4.5: the lowest three are g4, then g0 and g1 of the three tied at 1
    assert dropped_groups(select(method="mean", ratio=0.5)) == {4, 0, 1}
    assert dropped_groups(select(method="mean", ratio=0.0)) == set()
    assert dropped_groups(select(method="mean", ratio=1.0)) == set(range(6))


def test_std_drops_the_share_of_groups_with_the_lowest_spread() -> None:
    # stds 0, 1, 0, 2.16, 0, 1.12; 6 x 0.67 rounds down to 4
    assert dropped_groups(select(method="std", ratio=0.67)) == {0, 2, 4, 1}


def test_uid_drops_the_samples_farthest_from_their_group_mean() -> None:
    keep = select(method="uid", ratio=0.5)
    dropped = [(int(GROUPS[i]), float(RETURNS[i])) for i in np.flatnonzero(~keep)]
    # g0: one of three equal (the first); g1: of 0 and 2 (tied) the lower; g2 alone stays;
    # g3: 4 (3 from the mean); g4: one of two; g5: 3 and 6 (1.5 from 4.5 each)
    assert dropped == [(0, 1.0), (1, 0.0), (3, 4.0), (4, 0.0), (5, 3.0), (5, 6.0)]
    assert np.flatnonzero(~keep)[0] == 0


def test_the_ratio_rounds_down_as_the_reference_does() -> None:
    returns = np.arange(100, dtype=float)
    chosen = select_in_groups(returns, np.arange(100), 100, GroupFilter("mean", ratio=0.29))
    assert (~chosen.keep).sum() == 29  # 0.29 * 100 is 28.999999999999996 in floating point
    assert chosen.dropped_groups == {"mean": 29}


def test_structural_drops_come_first_and_the_share_is_of_the_groups_left() -> None:
    chosen = select_in_groups(RETURNS, GROUPS, 6, GroupFilter("mean", 0.5, drop_singleton=True))
    # g2 goes as a singleton; of the five left, 2 with the lowest mean: g4 (0) and g0 (1)
    assert dropped_groups(chosen.keep) == {2, 4, 0}
    assert chosen.dropped_groups == {"singleton": 1, "mean": 2}
    assert chosen.metrics() == {
        "group_filter/groups": 6,
        "group_filter/kept_groups": 3,
        "group_filter/kept_samples": 9,
        "group_filter/dropped_groups/singleton": 1,
        "group_filter/dropped_groups/mean": 2,
        "group_filter/dropped_samples/singleton": 1,
        "group_filter/dropped_samples/mean": 5,
    }


def test_a_failed_replay_drops_its_whole_group_whatever_the_filter() -> None:
    failed = np.zeros(RETURNS.size, bool)
    failed[12] = True  # one branch of g5
    for settings in (GroupFilter(), GroupFilter("mean", 0.5)):
        chosen = select_in_groups(RETURNS, GROUPS, 6, settings, failed)
        assert 5 in dropped_groups(chosen.keep)
        assert chosen.dropped_groups["replay_failed"] == 1
    # mean 0.5 over the five groups left: g4, g0
    assert dropped_groups(chosen.keep) == {5, 4, 0}


def table_of(order: np.ndarray) -> pd.DataFrame:
    episode, turn = GROUPS // 3, GROUPS % 3  # groups as (episode, turn), in code order
    frame = pd.DataFrame(
        {"game": "g", "episode": episode, "seat": 0, "turn": turn, "reward": RETURNS}
    )
    return frame.iloc[order].reset_index(drop=True)


@pytest.mark.parametrize("settings", [GroupFilter("mean"), GroupFilter("uid"), GroupFilter("dapo")])
def test_a_table_in_any_row_order_drops_the_same_samples(settings) -> None:
    """The same (group, return) pairs, whatever the row order (two rows of one group with the
    same return are interchangeable: `uid` may take either)."""

    def dropped(order: np.ndarray) -> list[tuple[int, float]]:
        keep = select_rows(table_of(order), settings).keep
        return sorted(
            (int(GROUPS[order][i]), float(RETURNS[order][i])) for i in np.flatnonzero(~keep)
        )

    straight = np.arange(RETURNS.size)
    keep = select_in_groups(RETURNS, GROUPS, 6, settings).keep
    assert select_rows(table_of(straight), settings).keep.tolist() == keep.tolist()
    for seed in range(3):
        assert dropped(np.random.default_rng(seed).permutation(RETURNS.size)) == dropped(straight)


def test_kept_advantages_score_the_kept_rows_in_their_groups_and_zero_the_rest() -> None:
    frame = table_of(np.arange(RETURNS.size))
    keep = select_rows(frame, GroupFilter("uid", 0.5)).keep
    got = kept_advantages(frame.to_dict("list"), keep, "at_grpo")
    assert not got[~keep].any()
    # g3 without its 4 is [-1, 0]: -1 and +1; g5 without 3 and 6 is [4, 5]
    assert got[6:8].tolist() == [-1.0, 1.0] and got[12:14].tolist() == [-1.0, 1.0]
    expected = compute_advantages(frame[keep], "at_grpo")
    assert got[keep] == pytest.approx(expected)


# ---- settings ------------------------------------------------------------------------------


def test_an_unknown_filter_or_ratio_is_one_line() -> None:
    with pytest.raises(MarsError, match="unknown group_filter 'median'; choose one of: none, mean"):
        GroupFilter("median")
    with pytest.raises(MarsError, match=r"group_filter_ratio must be in \[0, 1\]"):
        GroupFilter("mean", ratio=1.5)
    for bad in ({"group_filter": "median"}, {"group_filter_ratio": 2}):
        with pytest.raises(MarsError) as info:
            load_train_config(None, bad, local=True)
        assert "\n" not in str(info.value) and "group_filter" in str(info.value)


def test_group_filtering_needs_tree_groups() -> None:
    check_group_filter(TrainConfig(estimator="at_grpo", group_filter="std"))
    check_group_filter(TrainConfig(estimator="marshal"))  # off: nothing to check
    with pytest.raises(MarsError, match="need --estimator at_grpo, not marshal"):
        check_group_filter(TrainConfig(estimator="marshal", drop_flat_groups=True))
    settings = GroupFilter.of(TrainConfig(group_filter="uid", group_filter_ratio=0.25))
    assert settings == GroupFilter("uid", 0.25) and GroupFilter(**settings.as_dict()) == settings


def test_verl_workers_are_told_the_filter_only_when_the_run_filters(tmp_path) -> None:
    import json

    from train_backend.verl import names
    from train_backend.verl.overrides import RunPaths, verl_settings

    key = "+ray_kwargs.ray_init.runtime_env.env_vars"
    plain = TrainConfig(model="m", estimator="at_grpo")
    assert names.GROUP_FILTER_ENV not in verl_settings(plain, RunPaths(tmp_path))[key]
    config = plain.model_copy(update={"group_filter": "std", "drop_singleton_groups": True})
    sent = verl_settings(config, RunPaths(tmp_path))[key][names.GROUP_FILTER_ENV]
    assert GroupFilter(**json.loads(sent)) == GroupFilter("std", 0.5, drop_singleton=True)


def test_a_step_ranks_groups_within_each_seat() -> None:
    # Seat 0's returns are all higher than seat 1's: ranked together, `mean` at 0.5 would drop
    # every group of seat 1; ranked per seat (per agent, as the reference), half of each.
    rows = [
        {"game": "g", "episode": episode, "seat": seat, "turn": 0, "reward": base + episode + k}
        for seat, base in ((0, 100.0), (1, 0.0))
        for episode in range(4)
        for k in (0.0, 0.5)
    ]
    chosen = select_step(rows, GroupFilter(method="mean", ratio=0.5))
    assert chosen is not None and chosen.groups == 8 and chosen.kept_groups == 4
    kept = {(r["seat"], r["episode"]) for r, k in zip(rows, chosen.keep, strict=True) if k}
    assert kept == {(0, 2), (0, 3), (1, 2), (1, 3)}
