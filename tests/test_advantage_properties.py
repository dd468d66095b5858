"""Properties of the advantage estimators, checked with hypothesis on random self-play batches.

Batches mix two games, both seats, one to four turns per seat (seat 1 sometimes never moves) and
shaped rewards in steps of 0.05 between -12 and 3, rows shuffled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from train_backend.advantage import ESTIMATORS, compute_advantages

COLUMNS = ["game", "episode", "seat", "turn", "reward", "tokens"]
REWARDS = st.integers(-240, 60).map(lambda steps: steps * 0.05)
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def turn_tables(draw: st.DrawFn) -> pd.DataFrame:
    rows = []
    for episode in range(draw(st.integers(1, 6))):
        game = draw(st.sampled_from(["tic_tac_toe", "kuhn_poker"]))
        for seat in (0, 1):
            for turn in range(draw(st.integers(1 - seat, 4))):
                tokens = draw(st.integers(1, 400))
                rows.append((game, episode, seat, turn, draw(REWARDS), tokens))
    table = pd.DataFrame(rows, columns=COLUMNS)
    order = draw(st.permutations(range(len(table))))
    return table.iloc[list(order)].reset_index(drop=True)


def agent_groups(table: pd.DataFrame) -> list[np.ndarray]:
    """Row positions of each (game, seat) group."""
    keys = table["game"] + "/" + table["seat"].astype(str)
    return [np.flatnonzero(keys.to_numpy() == key) for key in keys.unique()]


def last_turn_rows(table: pd.DataFrame) -> np.ndarray:
    length = table.groupby(["game", "episode", "seat"])["turn"].transform("size")
    return (table["turn"] == length - 1).to_numpy()


@PROPERTY_SETTINGS
@given(turn_tables(), st.data())
def test_permuting_rows_permutes_the_advantages_exactly(table: pd.DataFrame, data) -> None:
    """Results depend on the rows' contents only, so a shuffle gives bit-identical values."""
    order = np.array(data.draw(st.permutations(range(len(table)))))
    shuffled = table.iloc[order].reset_index(drop=True)
    for estimator in ESTIMATORS:
        np.testing.assert_array_equal(
            compute_advantages(shuffled, estimator), compute_advantages(table, estimator)[order]
        )


@PROPERTY_SETTINGS
@given(turn_tables())
def test_marshal_groups_have_mean_zero_and_std_one(table: pd.DataFrame) -> None:
    """Within each (game, seat) group, over its turns: mean 0; std 1, or the group is a single
    turn (advantage exactly 0), or its spread is under eps (centred only, so std < eps)."""
    advantages = compute_advantages(table, "marshal")
    for rows in agent_groups(table):
        values = advantages[rows]
        if rows.size == 1:
            assert values[0] == 0.0
            continue
        assert abs(values.mean()) < 1e-9
        std = values.std()
        assert abs(std - 1.0) < 1e-9 or std < 1e-6


@PROPERTY_SETTINGS
@given(turn_tables(), st.integers(-20, 20).map(lambda steps: steps * 0.05), st.data())
def test_marshal_ignores_a_constant_added_to_one_agents_outcome(
    table: pd.DataFrame, bonus: float, data
) -> None:
    """Adding c to the *final* turn reward of every trajectory of one (game, seat) group adds c to
    every turn-level return of that group (each return sums the rewards up to the end), so the
    group's normalised advantages do not change: the baseline of the outcome reward is irrelevant.

    The naive property (shift *every* reward of the group by c) is false for turn-level returns:
    turn k's return moves by c x (turns left), which differs between turns and trajectories of
    uneven length. It holds exactly for marshal_reference, whose step 1 removes the mean of the
    per-turn rewards; that case is checked by hand in test_advantage_estimators.py.
    """
    rows = data.draw(st.sampled_from(agent_groups(table)))
    shifted = table.copy()
    target = np.zeros(len(table), dtype=bool)
    target[rows] = True
    shifted.loc[target & last_turn_rows(table), "reward"] += bonus
    np.testing.assert_allclose(
        compute_advantages(shifted, "marshal"), compute_advantages(table, "marshal"), atol=1e-8
    )


@PROPERTY_SETTINGS
@given(turn_tables(), st.floats(0.25, 8.0), st.data())
def test_marshal_is_unchanged_when_one_agents_rewards_are_rescaled(
    table: pd.DataFrame, factor: float, data
) -> None:
    """Multiplying one group's rewards by a > 0 multiplies its returns, mean and std by a (the
    spread of distinct 0.05-step returns stays far above eps), and leaves every other group's
    advantages bit-identical: groups never share statistics."""
    rows = data.draw(st.sampled_from(agent_groups(table)))
    scaled = table.copy()
    scaled.loc[rows, "reward"] *= factor
    before = compute_advantages(table, "marshal")
    after = compute_advantages(scaled, "marshal")
    np.testing.assert_allclose(after[rows], before[rows], atol=1e-8)
    others = np.setdiff1d(np.arange(len(table)), rows)
    np.testing.assert_array_equal(after[others], before[others])


@PROPERTY_SETTINGS
@given(turn_tables())
def test_trajectory_level_estimators_give_all_turns_of_a_trajectory_one_value(
    table: pd.DataFrame,
) -> None:
    """no_turn_level and grpo: one advantage per (game, episode, seat), whose mean over the
    trajectories of each normalisation group is 0."""
    for estimator, group_keys in (("no_turn_level", ["game", "seat"]), ("grpo", ["game"])):
        frame = table.assign(advantage=compute_advantages(table, estimator))
        per_trajectory = frame.groupby(["game", "episode", "seat"])["advantage"]
        assert (per_trajectory.nunique() == 1).all()
        firsts = per_trajectory.first().reset_index()
        means = firsts.groupby(group_keys)["advantage"].mean()
        assert np.all(np.abs(means.to_numpy()) < 1e-9)


@PROPERTY_SETTINGS
@given(turn_tables())
def test_marshal_reference_is_whitened_over_tokens(table: pd.DataFrame) -> None:
    """Step 5 makes the token-weighted mean 0 and the token-weighted std 1 (or under eps)."""
    advantages = compute_advantages(table, "marshal_reference")
    weights = table["tokens"].to_numpy(dtype=float)
    mean = np.average(advantages, weights=weights)
    std = np.sqrt(np.average((advantages - mean) ** 2, weights=weights))
    assert abs(mean) < 1e-9
    assert abs(std - 1.0) < 1e-9 or std < 1e-6 or len(table) == 1
