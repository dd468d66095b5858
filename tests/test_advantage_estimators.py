"""Hand-computed checks of every advantage estimator on a small self-play batch.

Every expected number below is derived in the comments from the rewards, by hand; nothing is
computed by a second implementation.

The batch: two games, both seats, uneven turn counts, a draw and an invalid move. Rewards are shaped
as in the paper: +0.05 per valid turn, the game outcome on each seat's last turn, a draw worth +0.1,
an invalid reply worth -1 - 10 (and nothing more for the other seat).

    kuhn_poker  ep 0  s0 bets, s1 calls, s0 wins 2 chips   s0: [2.05]        s1: [-1.95]
    kuhn_poker  ep 1  s0 checks, s1 bets, s0 folds (-1)    s0: [0.05, -0.95] s1: [1.05]
    kuhn_poker  ep 2  the same play as ep 0                s0: [2.05]        s1: [-1.95]
    leduc_poker ep 0  a draw (split pot), two rounds       s0: [0.05, 0.15]  s1: [0.05, 0.15]
    leduc_poker ep 1  s0 moves, s1 replies invalidly       s0: [0.05]        s1: [-11.0]

Turn-level returns G (gamma = 1, sum of the seat's rewards from this turn on):
    K0s0 2.05   K1s0t0 0.05-0.95 = -0.90   K1s0t1 -0.95   K2s0 2.05
    K0s1 -1.95  K1s1 1.05                  K2s1 -1.95
    L0s0t0 0.05+0.15 = 0.20   L0s0t1 0.15  L1s0 0.05
    L0s1t0 0.20               L0s1t1 0.15  L1s1 -11.0
Trajectory returns T: K0s0 2.05, K1s0 -0.90, K2s0 2.05, K0s1 -1.95, K1s1 1.05, K2s1 -1.95,
    L0s0 0.20, L1s0 0.05, L0s1 0.20, L1s1 -11.0
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from core.errors import MarsError
from train_backend.advantage import ESTIMATORS, compute_advantages

K, L = "kuhn_poker", "leduc_poker"
COLUMNS = ["game", "episode", "seat", "turn", "reward"]
# Rows deliberately out of order: results must follow the caller's rows, not a sorted layout.
ROWS: dict[str, tuple[str, int, int, int, float]] = {
    "L1s1": (L, 1, 1, 0, -11.0),
    "K0s0": (K, 0, 0, 0, 2.05),
    "K1s0t1": (K, 1, 0, 1, -0.95),
    "L0s0t0": (L, 0, 0, 0, 0.05),
    "K1s1": (K, 1, 1, 0, 1.05),
    "L0s1t1": (L, 0, 1, 1, 0.15),
    "K2s0": (K, 2, 0, 0, 2.05),
    "L1s0": (L, 1, 0, 0, 0.05),
    "K0s1": (K, 0, 1, 0, -1.95),
    "L0s0t1": (L, 0, 0, 1, 0.15),
    "K1s0t0": (K, 1, 0, 0, 0.05),
    "K2s1": (K, 2, 1, 0, -1.95),
    "L0s1t0": (L, 0, 1, 0, 0.05),
}
TOL = 1e-6
R2 = math.sqrt(2.0)
R14 = math.sqrt(14.0)


def batch() -> pd.DataFrame:
    return pd.DataFrame(list(ROWS.values()), columns=COLUMNS)


def in_row_order(expected: dict[str, float]) -> np.ndarray:
    assert set(expected) == set(ROWS)
    return np.array([expected[label] for label in ROWS])


def test_marshal_normalises_turn_returns_per_game_and_seat() -> None:
    # (kuhn, 0): G = [2.05, -0.90, -0.95, 2.05], mean 2.25/4 = 0.5625,
    #   deviations 1.4875, -1.4625, -1.5125, 1.4875, variance 8.851875/4 = 2.21296875,
    #   std 1.4876050..., advantages 0.9999294, -0.9831239, -1.0167349, 0.9999294.
    # (kuhn, 1): G = [-1.95, 1.05, -1.95], mean -0.95, deviations -1, 2, -1, variance 6/3 = 2:
    #   advantages -1/√2, 2/√2, -1/√2.
    # (leduc, 0): G = [0.20, 0.15, 0.05], mean 0.40/3, deviations 4/60, 1/60, -5/60,
    #   variance (16+1+25)/3 /3600 = 14/3600, std √14/60: advantages 4/√14, 1/√14, -5/√14.
    # (leduc, 1): G = [0.20, 0.15, -11.0], mean -10.65/3 = -3.55, deviations 3.75, 3.70, -7.45,
    #   variance (14.0625+13.69+55.5025)/3 = 27.751667, std 5.2679851: 0.7118471, 0.7023558,
    #   -1.4142029.
    expected = {
        "K0s0": 0.9999294,
        "K1s0t0": -0.9831239,
        "K1s0t1": -1.0167349,
        "K2s0": 0.9999294,
        "K0s1": -1 / R2,
        "K1s1": 2 / R2,
        "K2s1": -1 / R2,
        "L0s0t0": 4 / R14,
        "L0s0t1": 1 / R14,
        "L1s0": -5 / R14,
        "L0s1t0": 0.7118471,
        "L0s1t1": 0.7023558,
        "L1s1": -1.4142029,
    }
    got = compute_advantages(batch())
    np.testing.assert_allclose(got, in_row_order(expected), atol=TOL)
    np.testing.assert_array_equal(got, compute_advantages(batch(), "marshal", scale="mean_std"))


def test_marshal_mean_scale_only_centres() -> None:
    # The deviations of the previous test, in reward units.
    expected = {
        "K0s0": 1.4875,
        "K1s0t0": -1.4625,
        "K1s0t1": -1.5125,
        "K2s0": 1.4875,
        "K0s1": -1.0,
        "K1s1": 2.0,
        "K2s1": -1.0,
        "L0s0t0": 4 / 60,
        "L0s0t1": 1 / 60,
        "L1s0": -5 / 60,
        "L0s1t0": 3.75,
        "L0s1t1": 3.70,
        "L1s1": -7.45,
    }
    got = compute_advantages(batch(), "marshal", scale="mean")
    np.testing.assert_allclose(got, in_row_order(expected), atol=1e-12)


def test_no_agent_norm_pools_the_seats_of_a_game() -> None:
    # kuhn: G = [2.05, -1.95, -0.90, -0.95, 1.05, 2.05, -1.95], sum -0.6, mean -3/35,
    #   Σ G² = 18.825, variance 18.825/7 - (3/35)² = 26283/9800, std 1.6376623:
    #   (2.05 + 3/35)/1.6376623 = 1.3041235, (-1.95 + 3/35)/... = -1.1383821,
    #   (-0.90 + 3/35)/... = -0.4972243, (-0.95 + 3/35)/... = -0.5277557,
    #   (1.05 + 3/35)/... = 0.6934971.
    # leduc: G = [0.20, 0.15, 0.20, 0.15, 0.05, -11.0], mean -10.25/6 = -41/24,
    #   variance 248681/14400, std 4.1556604: 0.4592130, 0.4471812, 0.4592130, 0.4471812,
    #   0.4231177, -2.2359061.
    expected = {
        "K0s0": 1.3041235,
        "K1s0t0": -0.4972243,
        "K1s0t1": -0.5277557,
        "K2s0": 1.3041235,
        "K0s1": -1.1383821,
        "K1s1": 0.6934971,
        "K2s1": -1.1383821,
        "L0s0t0": 0.4592130,
        "L0s0t1": 0.4471812,
        "L1s0": 0.4231177,
        "L0s1t0": 0.4592130,
        "L0s1t1": 0.4471812,
        "L1s1": -2.2359061,
    }
    got = compute_advantages(batch(), "no_agent_norm")
    np.testing.assert_allclose(got, in_row_order(expected), atol=TOL)


def test_no_turn_level_gives_every_turn_its_trajectory_advantage() -> None:
    # (kuhn, 0): T = [2.05, -0.90, 2.05] over trajectories (not turns: ep 1's two turns count
    #   once), mean 3.2/3, deviations 0.98333 x [1, -2, 1]: advantages [1, -2, 1]/√2.
    # (kuhn, 1): T = [-1.95, 1.05, -1.95], mean -0.95, deviations [-1, 2, -1]: [-1, 2, -1]/√2.
    # (leduc, 0): T = [0.20, 0.05]: two values normalise to +1 and -1; (leduc, 1): [0.20, -11] too.
    expected = {
        "K0s0": 1 / R2,
        "K1s0t0": -2 / R2,
        "K1s0t1": -2 / R2,
        "K2s0": 1 / R2,
        "K0s1": -1 / R2,
        "K1s1": 2 / R2,
        "K2s1": -1 / R2,
        "L0s0t0": 1.0,
        "L0s0t1": 1.0,
        "L1s0": -1.0,
        "L0s1t0": 1.0,
        "L0s1t1": 1.0,
        "L1s1": -1.0,
    }
    got = compute_advantages(batch(), "no_turn_level")
    np.testing.assert_allclose(got, in_row_order(expected), atol=1e-9)


def test_grpo_normalises_trajectory_returns_over_each_game() -> None:
    # kuhn: T = [2.05, -0.90, 2.05, -1.95, 1.05, -1.95] (both seats pooled), mean 0.35/6 = 7/120,
    #   variance 8593/2880, std 1.7273337: (2.05 - 7/120)/std = 1.1530297,
    #   (-0.90 - 7/120)/std = -0.5548051, (-1.95 - 7/120)/std = -1.1626785, (1.05 - 7/120)/std =
    #   0.5741027.
    # leduc: T = [0.20, 0.20, 0.05, -11.0], mean -10.55/4 = -2.6375, deviations 2.8375, 2.8375,
    #   2.6875, -8.3625, variance 93.256875/4, std 4.8284799: 0.5876591, 0.5876591, 0.5565934,
    #   -1.7319115.
    expected = {
        "K0s0": 1.1530297,
        "K1s0t0": -0.5548051,
        "K1s0t1": -0.5548051,
        "K2s0": 1.1530297,
        "K0s1": -1.1626785,
        "K1s1": 0.5741027,
        "K2s1": -1.1626785,
        "L0s0t0": 0.5876591,
        "L0s0t1": 0.5876591,
        "L1s0": 0.5565934,
        "L0s1t0": 0.5876591,
        "L0s1t1": 0.5876591,
        "L1s1": -1.7319115,
    }
    got = compute_advantages(batch(), "grpo")
    np.testing.assert_allclose(got, in_row_order(expected), atol=TOL)


def test_grpo_uses_the_group_column_when_present() -> None:
    # Kuhn episodes 0 and 2 replay one deal (group "a"); episode 1 is group "b"; leduc is "c".
    # a: T = [2.05, -1.95, 2.05, -1.95], mean 0.05, deviations ±2, std 2: ±1.
    # b: T = [-0.90, 1.05], two values: -1 and +1.
    # c: as in the per-game test above.
    table = batch()
    table["group"] = np.where(table["game"] == L, "c", np.where(table["episode"] == 1, "b", "a"))
    expected = {
        "K0s0": 1.0,
        "K1s0t0": -1.0,
        "K1s0t1": -1.0,
        "K2s0": 1.0,
        "K0s1": -1.0,
        "K1s1": 1.0,
        "K2s1": -1.0,
        "L0s0t0": 0.5876591,
        "L0s0t1": 0.5876591,
        "L1s0": 0.5565934,
        "L0s1t0": 0.5876591,
        "L0s1t1": 0.5876591,
        "L1s1": -1.7319115,
    }
    got = compute_advantages(table, "grpo")
    np.testing.assert_allclose(got, in_row_order(expected), atol=TOL)
    # The other estimators ignore the column.
    np.testing.assert_array_equal(compute_advantages(table), compute_advantages(batch()))


# marshal_reference, facts.md section 1 steps 1-5, traced on the batch.
# Step 1, centre each turn reward on the mean turn reward of its (game, seat):
#   (kuhn, 0): rewards 2.05, 0.05, -0.95, 2.05, mean 0.8   -> r' = 1.25, -0.75, -1.75, 1.25
#   (kuhn, 1): -1.95, 1.05, -1.95, mean -0.95              -> r' = -1, 2, -1
#   (leduc, 0): L0t0 0.05, L0t1 0.15, L1 0.05, mean 1/12   -> r' = -1/30, 2/30, -1/30
#   (leduc, 1): L0t0 0.05, L0t1 0.15, L1 -11, mean -3.6    -> r' = 3.65, 3.75, -7.4
# Step 2, whiten over the batch: the mean of r' is 0, so this only rescales (by the std
#   2.7018757); with scale="mean" it changes nothing. Below, values are in units of r'.
# Step 3, turn-level returns of r' within each trajectory:
#   seat 0: K0 1.25, K1t0 -0.75-1.75 = -2.5, K1t1 -1.75, K2 1.25, L0t0 -1/30+2/30 = 1/30,
#           L0t1 2/30, L1 -1/30
#   seat 1: K0 -1, K1 2, K2 -1, L0t0 3.65+3.75 = 7.4, L0t1 3.75, L1 -7.4
# Step 4, per seat (games pooled) subtract the mean of the DISTINCT return values:
#   seat 0 distinct {1.25, -2.5, -1.75, 1/30, 2/30, -1/30} (1.25 counted once): mean -22/45
#   seat 1 distinct {-1, 2, 7.4, 3.75, -7.4} (-1 counted once): mean 0.95
#   B: K0s0 313/180 = 1.7388889, K1s0t0 -181/90, K1s0t1 -227/180, K2s0 313/180, L0s0t0 47/90,
#      L0s0t1 5/9, L1s0 41/90; K0s1 -1.95, K1s1 1.05, K2s1 -1.95, L0s1t0 6.45, L0s1t1 2.8,
#      L1s1 -8.35
# Step 5, whiten over the batch (one weight per turn here): mean of B = -19/1170 = -0.0162393.
REFERENCE_CENTRED = {
    "K0s0": 313 / 180 + 19 / 1170,
    "K1s0t0": -181 / 90 + 19 / 1170,
    "K1s0t1": -227 / 180 + 19 / 1170,
    "K2s0": 313 / 180 + 19 / 1170,
    "L0s0t0": 47 / 90 + 19 / 1170,
    "L0s0t1": 5 / 9 + 19 / 1170,
    "L1s0": 41 / 90 + 19 / 1170,
    "K0s1": -1.95 + 19 / 1170,
    "K1s1": 1.05 + 19 / 1170,
    "K2s1": -1.95 + 19 / 1170,
    "L0s1t0": 6.45 + 19 / 1170,
    "L0s1t1": 2.8 + 19 / 1170,
    "L1s1": -8.35 + 19 / 1170,
}


def test_marshal_reference_steps_one_to_five_centre_only() -> None:
    # With scale="mean" steps 2 and 5 only centre, so the output is B - mean(B), in reward units.
    got = compute_advantages(batch(), "marshal_reference", scale="mean")
    np.testing.assert_allclose(got, in_row_order(REFERENCE_CENTRED), atol=1e-12)


def test_marshal_reference_steps_one_to_five_whitened() -> None:
    # Step 5 with mean_std: Σ (B - mean)² / 13 = 1231487/114075 = 10.7954153, std 3.2856377;
    # the rescale of step 2 cancels here. E.g. K0s0: 1.7551282 / 3.2856377 = 0.5341819.
    std = 3.2856377306
    expected = {label: value / std for label, value in REFERENCE_CENTRED.items()}
    got = compute_advantages(batch(), "marshal_reference")
    np.testing.assert_allclose(got, in_row_order(expected), atol=TOL)
    assert got[list(ROWS).index("K0s0")] == pytest.approx(0.5341819, abs=TOL)


def test_marshal_reference_whitens_token_weighted() -> None:
    # Kuhn turns have 100 tokens, leduc turns 300 (weights 1 and 3, total 25).
    # Weighted mean of B: (Σ kuhn B + 3 Σ leduc B)/25 = (-119/45 + 3 * 73/30)/25 = 419/2250.
    # Weighted variance Σ w (B - 419/2250)² / 25 = 15.1753855, std 3.8955597.
    mean, std = 419 / 2250, 3.8955597135
    uncentred = {label: value - 19 / 1170 for label, value in REFERENCE_CENTRED.items()}  # B
    expected = {label: (value - mean) / std for label, value in uncentred.items()}
    table = batch()
    table["tokens"] = np.where(table["game"] == K, 100, 300)
    got = compute_advantages(table, "marshal_reference")
    np.testing.assert_allclose(got, in_row_order(expected), atol=TOL)
    assert got[list(ROWS).index("L1s1")] == pytest.approx(-2.1912698, abs=TOL)
    # Token weights enter nowhere else: without the column the result is the unweighted one.
    assert not np.allclose(got, compute_advantages(batch(), "marshal_reference"))


def test_marshal_reference_baseline_counts_each_distinct_return_once() -> None:
    # One game. Seat 0: four single-turn episodes with rewards 1, 1, 1, 4; seat 1: two episodes,
    # rewards 0 and 2. scale="mean".
    # Step 1: seat 0 mean 7/4 -> r' = -0.75 x3, 2.25; seat 1 mean 1 -> r' = -1, 1.
    # Step 3: one turn each, so the returns equal r'.
    # Step 4: seat 0 distinct {-0.75, 2.25}, mean 0.75 -> B = -1.5 x3, 1.5 (a mean over turns
    #   would be 0 and leave r' unchanged); seat 1 distinct {-1, 1}, mean 0 -> B = -1, 1.
    # Step 5: mean of B over the six turns = (-4.5 + 1.5 - 1 + 1)/6 = -0.5
    #   -> -1, -1, -1, 2, -0.5, 1.5.
    table = pd.DataFrame(
        {
            "game": ["g"] * 6,
            "episode": [0, 1, 2, 3, 0, 1],
            "seat": [0, 0, 0, 0, 1, 1],
            "turn": [0] * 6,
            "reward": [1.0, 1.0, 1.0, 4.0, 0.0, 2.0],
        }
    )
    got = compute_advantages(table, "marshal_reference", scale="mean")
    np.testing.assert_allclose(got, [-1.0, -1.0, -1.0, 2.0, -0.5, 1.5], atol=1e-12)


def test_marshal_reference_ignores_a_constant_shift_of_one_agents_rewards() -> None:
    # Step 1 subtracts the (game, seat) mean, so adding 10 to every kuhn seat-1 reward changes
    # nothing downstream (contrast: marshal's turn-level returns would shift by 10 x turns left).
    shifted = batch()
    mask = (shifted["game"] == K) & (shifted["seat"] == 1)
    shifted.loc[mask, "reward"] += 10.0
    np.testing.assert_allclose(
        compute_advantages(shifted, "marshal_reference"),
        compute_advantages(batch(), "marshal_reference"),
        atol=1e-9,
    )


def test_gamma_discounts_per_turn_of_the_seat() -> None:
    # One trajectory with rewards [1, 0, 2] and gamma 0.5: G2 = 2, G1 = 0 + 0.5*2 = 1,
    # G0 = 1 + 0.5*1 = 1.5. A second trajectory of the same (game, seat) with reward [1.5]: G = 1.5.
    # scale="mean": the group mean of [1.5, 1, 2, 1.5] is 1.5 -> 0, -0.5, 0.5, 0.
    table = pd.DataFrame(
        {
            "game": ["g"] * 4,
            "episode": [0, 0, 0, 1],
            "seat": [0] * 4,
            "turn": [0, 1, 2, 0],
            "reward": [1.0, 0.0, 2.0, 1.5],
        }
    )
    got = compute_advantages(table, "marshal", gamma=0.5, scale="mean")
    np.testing.assert_allclose(got, [0.0, -0.5, 0.5, 0.0], atol=1e-12)
    # gamma = 0 keeps only each turn's own reward: [1, 0, 2, 1.5], mean 1.125.
    got = compute_advantages(table, "marshal", gamma=0.0, scale="mean")
    np.testing.assert_allclose(got, [-0.125, -1.125, 0.875, 0.375], atol=1e-12)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_a_group_of_one_gives_zero_not_the_raw_score(estimator: str) -> None:
    # A single turn is alone in every group (its (game, seat), its game, the batch).
    table = pd.DataFrame({"game": ["g"], "episode": [7], "seat": [1], "turn": [0], "reward": [5.0]})
    np.testing.assert_array_equal(compute_advantages(table, estimator), [0.0])
    np.testing.assert_array_equal(compute_advantages(table, estimator, scale="mean"), [0.0])


def test_a_lone_trajectory_gets_zero_in_trajectory_level_estimators() -> None:
    # (g, seat 0) holds one trajectory of three turns: one value in its group -> 0 for all turns.
    table = pd.DataFrame(
        {
            "game": ["g", "g", "g", "h", "h"],
            "episode": [0, 0, 0, 0, 1],
            "seat": [0, 0, 0, 0, 0],
            "turn": [0, 1, 2, 0, 0],
            "reward": [0.05, 0.05, 1.05, 3.0, 1.0],
        }
    )
    # (h, 0): T = [3, 1] -> +1, -1.
    for estimator in ("no_turn_level", "grpo"):
        got = compute_advantages(table, estimator)
        np.testing.assert_allclose(got, [0.0, 0.0, 0.0, 1.0, -1.0], atol=1e-12)


def test_zero_spread_is_centred_only() -> None:
    # (g, 0): two trajectories of 1 turn with returns 0.3 and 0.3 + 1e-9: std 5e-10 < eps 1e-6, so
    # the advantages are the deviations -5e-10, +5e-10, not -1, +1.
    # (g, 1): equal returns 2, 2 -> exactly 0.
    table = pd.DataFrame(
        {
            "game": ["g"] * 4,
            "episode": [0, 1, 0, 1],
            "seat": [0, 0, 1, 1],
            "turn": [0] * 4,
            "reward": [0.3, 0.3 + 1e-9, 2.0, 2.0],
        }
    )
    got = compute_advantages(table)
    np.testing.assert_allclose(got, [-5e-10, 5e-10, 0.0, 0.0], atol=1e-15)
    # Above eps the same group is divided by its std.
    np.testing.assert_allclose(compute_advantages(table, eps=1e-10)[:2], [-1.0, 1.0], atol=1e-6)


def test_episode_ids_are_scoped_by_game() -> None:
    # Episode 0 of two different games are two trajectories, not one with duplicate turns.
    table = pd.DataFrame(
        {
            "game": ["a", "b", "a", "b"],
            "episode": [0, 0, 1, 1],
            "seat": [0, 0, 0, 0],
            "turn": [0, 0, 0, 0],
            "reward": [1.0, 5.0, 3.0, 9.0],
        }
    )
    # (a, 0): [1, 3] -> -1, +1; (b, 0): [5, 9] -> -1, +1.
    np.testing.assert_allclose(compute_advantages(table), [-1.0, -1.0, 1.0, 1.0], atol=1e-12)


def test_a_mapping_of_arrays_gives_the_same_result_as_a_dataframe() -> None:
    frame = batch()
    columns = {name: frame[name].to_numpy() for name in COLUMNS}
    columns["game"] = np.array(frame["game"].tolist())  # numpy unicode strings
    as_lists = {name: frame[name].tolist() for name in COLUMNS}
    for estimator in ESTIMATORS:
        expected = compute_advantages(frame, estimator)
        np.testing.assert_array_equal(compute_advantages(columns, estimator), expected)
        np.testing.assert_array_equal(compute_advantages(as_lists, estimator), expected)


def test_an_empty_table_gives_an_empty_array() -> None:
    empty = pd.DataFrame({name: [] for name in COLUMNS})
    assert compute_advantages(empty).shape == (0,)


def test_estimator_names() -> None:
    names = ("marshal", "marshal_reference", "no_turn_level", "no_agent_norm", "grpo", "at_grpo")
    assert names == ESTIMATORS


def _with(column: str, values: list[object]) -> pd.DataFrame:
    """Four valid single-turn rows (kuhn episodes 0 and 2) with one column replaced."""
    rows = [ROWS[label] for label in ("K0s0", "K0s1", "K2s0", "K2s1")]
    table = pd.DataFrame(rows, columns=COLUMNS)
    table[column] = values
    return table


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: compute_advantages(batch(), "ppo"), "unknown advantage estimator 'ppo'"),
        (
            lambda: compute_advantages(batch(), gama=0.9),
            "unknown advantage option 'gama' (did you mean 'gamma'?)",
        ),
        (lambda: compute_advantages(batch(), gamma=1.5), "gamma must be in [0, 1]"),
        (lambda: compute_advantages(batch(), gamma="0.9"), "gamma must be a finite number"),
        (lambda: compute_advantages(batch(), eps=0), "eps must be > 0"),
        (lambda: compute_advantages(batch(), scale="std"), "scale must be one of mean, mean_std"),
        (lambda: compute_advantages(batch(), "grpo", gamma=0.9), "gamma must be 1"),
        (
            lambda: compute_advantages(batch().drop(columns=["seat", "turn"])),
            "lacks column(s) seat, turn",
        ),
        (lambda: compute_advantages([1, 2, 3]), "must be a pandas DataFrame or a mapping"),
        (
            lambda: compute_advantages(_with("reward", [1.0, float("nan"), 0.0, float("nan")])),
            "column 'reward' has 2 NaN value(s) (first at row 1)",
        ),
        (
            lambda: compute_advantages(_with("reward", [1.0, 0.0, float("inf"), 0.0])),
            "column 'reward' has 1 infinite value(s) (first at row 2)",
        ),
        (
            lambda: compute_advantages(_with("reward", ["a", "b", "c", "d"])),
            "column 'reward' must be numeric",
        ),
        (
            lambda: compute_advantages(_with("game", [K, None, K, K])),
            "column 'game' has 1 missing value(s) (first at row 1)",
        ),
        (lambda: compute_advantages(_with("turn", [0, 0, 0.5, 0])), "whole numbers >= 0"),
        (lambda: compute_advantages(_with("turn", [0, -1, 0, 0])), "whole numbers >= 0"),
        (
            lambda: compute_advantages(
                {"game": ["a"], "episode": [0, 1], "seat": [0], "turn": [0], "reward": [1.0]}
            ),
            "differ in length",
        ),
        (
            lambda: compute_advantages(_with("tokens", [10, -1, 10, 10]), "marshal_reference"),
            "column 'tokens' must be >= 0",
        ),
        (
            lambda: compute_advantages(_with("tokens", [0, 0, 0, 0]), "marshal_reference"),
            "sums to zero",
        ),
    ],
)
def test_bad_input_raises_a_one_line_mars_error(call, message: str) -> None:
    with pytest.raises(MarsError) as caught:
        call()
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_duplicate_and_missing_turns_are_named() -> None:
    duplicate = batch()
    duplicate.loc[duplicate.index[2], "turn"] = 0  # K1s0 now has turns [0, 0]
    with pytest.raises(MarsError, match=r"game 'kuhn_poker', episode 1, seat 0 .*got \[0, 0\]"):
        compute_advantages(duplicate)
    gap = batch()
    gap.loc[gap.index[2], "turn"] = 2  # K1s0 now has turns [0, 2]
    with pytest.raises(MarsError, match=r"must be 0\.\.1 once each.*got \[0, 2\]"):
        compute_advantages(gap)


def test_group_must_be_constant_within_a_trajectory() -> None:
    table = batch()
    table["group"] = "a"
    table.loc[table.index[2], "group"] = "b"  # K1s0t1 differs from K1s0t0
    with pytest.raises(MarsError, match="constant within a trajectory"):
        compute_advantages(table, "grpo")
    assert compute_advantages(table, "marshal").shape == (13,)  # only grpo reads the column


def queen_facing_a_bet() -> pd.DataFrame:
    """Two Kuhn deals reaching one information state (a Queen facing a bet), call and fold
    branches in each: against a Jack call +2 / fold -1, against a King call -2 / fold -1; and a
    second state (a King facing a bet) in a third deal: call +2, fold -1."""
    rows = [
        (K, 0, 1, 0, 2.0, "Qb"), (K, 0, 1, 0, -1.0, "Qb"),
        (K, 1, 1, 0, -2.0, "Qb"), (K, 1, 1, 0, -1.0, "Qb"),
        (K, 2, 1, 0, 2.0, "Kb"), (K, 2, 1, 0, -1.0, "Kb"),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=[*COLUMNS, "state"])


def test_state_std_keeps_the_expected_direction_that_group_std_loses() -> None:
    branches = queen_facing_a_bet()
    # Group std: each deal is one vote of +-1, so calling with the Queen sums to 0.
    by_group = compute_advantages(branches, "at_grpo")
    assert by_group[[0, 2]].sum() == pytest.approx(0.0, abs=TOL)
    # state_std: centred in the deal (Qb: +1.5/-1.5 and -0.5/+0.5; Kb: +1.5/-1.5), divided by
    # the state's spread, sqrt((2 * 1.5^2 + 2 * 0.5^2) / 4) = sqrt(1.25) for Qb, 1.5 for Kb.
    by_state = compute_advantages(branches, "at_grpo", scale="state_std")
    q = math.sqrt(1.25)
    expected = [1.5 / q, -1.5 / q, -0.5 / q, 0.5 / q, 1.0, -1.0]
    assert by_state == pytest.approx(expected, abs=TOL)
    assert by_state[[0, 2]].sum() > 0  # calling with the Queen is worth +1 on average


def test_state_std_is_an_at_grpo_option() -> None:
    with pytest.raises(MarsError, match="state_std is an at_grpo option"):
        compute_advantages(batch(), "marshal", scale="state_std")
    with pytest.raises(MarsError, match="state"):  # the branches must name their state
        compute_advantages(queen_facing_a_bet().drop(columns="state"), "at_grpo", scale="state_std")
