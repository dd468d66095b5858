"""Advantage estimators for self-play training: a pure function over a table of turns.

`compute_advantages(turns, estimator, **options)` takes one row per turn with the columns
`episode`, `game`, `seat`, `turn` (0-based within the seat's own turns), `reward` (already shaped),
optionally `tokens` (used by marshal_reference), `group` (used by grpo) and `state` (the
information-state key, used with `state_weight`), and returns one advantage per row, in row order;
every token of a turn gets its turn's advantage.

`at_grpo` reads another table: one row per *branch*, K rows sharing (game, episode, seat, turn)
being K replies sampled at the same state, with `reward` the return of finishing the episode from
that branch (`train_backend.local.tree` builds it).

Notation used in the docstrings: a trajectory τ is one seat's turns in one episode of one game
(episode ids are scoped by game); r_k is the reward of its turn k and n its number of turns.

    G_k = Σ_{j=k}^{n-1} γ^(j-k) r_j        turn-level return (γ = `gamma`, 1 by default)
    T   = Σ_{j=0}^{n-1} r_j                 trajectory-level return
    norm_S(x) = (x - mean_S) / std_S        over the statistics set S of x's group; with
                                            scale="mean" only the mean is subtracted

std is the population std (ddof=0). Edge rules for every normalisation: a group with a single
value gives 0, a flat group (all values equal, to rounding) gives exactly 0, and a group with
std < `eps` is centred only. See docs/estimators.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd

from core.errors import MarsError
from core.names import unknown_name
from train_backend.group_ops import (
    SCALES,
    normalise_in_groups,
    subtract_mean_of_distinct,
    suffix_returns,
)
from train_backend.turn_table import TurnTable, dense_codes, load_branch_table, load_turn_table

DEFAULT_ESTIMATOR = "marshal"


@dataclass(frozen=True)
class AdvantageOptions:
    gamma: float = 1.0
    eps: float = 1e-6
    scale: str = "mean_std"
    # marshal_reference only: the MARSHAL code's ablation switches (docs/estimators.md)
    turn_level: bool = True
    agent_specific: bool = True
    # information-state groups (GiGPO's anchor states): A += state_weight * A_state; 0 = off
    state_weight: float = 0.0


OPTION_NAMES = ("gamma", "eps", "scale", "turn_level", "agent_specific", "state_weight")
# at_grpo only: centre in the tree group, divide by the spread of its information state's rows
STATE_STD = "state_std"
SWITCH_NAMES = ("turn_level", "agent_specific")
SWITCHED_ESTIMATOR = "marshal_reference"


def _marshal(table: TurnTable, options: AdvantageOptions) -> np.ndarray:
    """MARSHAL: turn-level return, then agent-specific normalisation ("sum then normalise").

    A(τ, k) = norm_{turns of (game, seat)}(G_k)

    Groups are (game, seat); the statistics run over all turns (rows) of the group.
    """
    returns = _turn_returns(table, table.reward, options.gamma)
    groups, n_groups = _codes_per_slot(table, table.game, table.seat)
    return normalise_in_groups(returns, groups, n_groups, scale=options.scale, eps=options.eps)


def _no_agent_norm(table: TurnTable, options: AdvantageOptions) -> np.ndarray:
    """Ablation "w/o agent-specific": turn-level return, one normalisation for all seats of a game.

    A(τ, k) = norm_{turns of game}(G_k)
    """
    returns = _turn_returns(table, table.reward, options.gamma)
    groups, n_groups = _codes_per_slot(table, table.game)
    return normalise_in_groups(returns, groups, n_groups, scale=options.scale, eps=options.eps)


def _no_turn_level(table: TurnTable, options: AdvantageOptions) -> np.ndarray:
    """Ablation "w/o turn-level": one trajectory-level return, agent-specific normalisation.

    A(τ, k) = norm_{trajectories of (game, seat)}(T_τ)   for every turn k of τ

    Statistics run over trajectories (one value per episode and seat), not over turns, so a long
    trajectory does not weigh more than a short one.
    """
    groups, n_groups = _group_codes(table.game, table.seat)
    return _trajectory_level(table, groups, n_groups, options)


def _grpo(table: TurnTable, options: AdvantageOptions) -> np.ndarray:
    """Vanilla GRPO: one trajectory-level return, normalised over the group.

    A(τ, k) = norm_{trajectories of group(τ)}(T_τ)   for every turn k of τ

    group(τ) is the `group` column when present (a prompt group: the same start replayed several
    times), else the game, all seats pooled. Statistics run over trajectories.
    """
    if table.group is not None:
        groups, n_groups = _group_codes(table.group)
    else:
        groups, n_groups = _group_codes(table.game)
    return _trajectory_level(table, groups, n_groups, options)


def _marshal_reference(table: TurnTable, options: AdvantageOptions) -> np.ndarray:
    """MARSHAL as its published code computes it, step by step (docs/references.md §2.4).

    1. r'_k  = r_k - mean_{turns of (game, seat)}(r)        agent-specific reward centring
    2. r''_k = norm_{all turns of the batch}(r'_k)           reward whitening
    3. G_k   = Σ_{j>=k} γ^(j-k) r''_j                        turn-level return of the trajectory
    4. B_k   = G_k - mean(distinct {G of all turns of seat}) agent-specific baseline, one per seat
                                                            (games pooled), each value once
    5. A_k   = norm_{all tokens of the batch}(B_k)           whitening weighted by `tokens` (1 per
                                                            turn when the column is absent)

    `scale` applies to the whitening steps 2 and 5 ("mean": centre only); steps 1 and 4 subtract a
    mean only, as in the code. Step 2's mean is already 0 after step 1, so it is a rescale, and
    with scale="mean_std" step 5 undoes any rescale: the output does not depend on step 2's std.

    The code's ablations are two switches on these steps:
    - turn_level=False ("w/o turn-level"): all of a seat's rewards sit on its last turn, so steps
      1-2 run over one total T_τ per trajectory and step 3 gives every turn of τ that value;
    - agent_specific=False ("w/o agent-specific"): step 1 centres per game and step 4 takes one
      baseline over the whole batch, with no seat split.
    """
    keys = (table.game, table.seat) if options.agent_specific else (table.game,)
    if options.turn_level:
        agent, n_agents = _codes_per_slot(table, *keys)
        centred = normalise_in_groups(table.reward, agent, n_agents, scale="mean", eps=options.eps)
        whole_batch = np.zeros(table.n_rows, dtype=np.int64)
        whitened = normalise_in_groups(
            centred, whole_batch, 1, scale=options.scale, eps=options.eps
        )
        returns = _turn_returns(table, whitened, options.gamma)
    else:
        totals = np.bincount(table.trajectory, weights=table.reward, minlength=table.n_trajectories)
        agent, n_agents = _group_codes(*keys)
        centred = normalise_in_groups(totals, agent, n_agents, scale="mean", eps=options.eps)
        every = np.zeros(table.n_trajectories, dtype=np.int64)
        whitened = normalise_in_groups(centred, every, 1, scale=options.scale, eps=options.eps)
        returns = whitened[table.trajectory]
    whole_batch = np.zeros(table.n_rows, dtype=np.int64)
    if options.agent_specific:
        seat = table.seat[table.trajectory]
        baselined = subtract_mean_of_distinct(returns, seat, int(seat.max()) + 1)
    else:
        baselined = subtract_mean_of_distinct(returns, whole_batch, 1)
    return normalise_in_groups(
        baselined, whole_batch, 1, scale=options.scale, eps=options.eps, weights=table.tokens
    )


def at_grpo_advantages(
    returns: np.ndarray, groups: np.ndarray, n_groups: int, options: AdvantageOptions
) -> np.ndarray:
    """AT-GRPO (Stronger-MAS): each branch's return normalised within its tree group.

    A(b) = norm_{branches of (game, episode, seat, turn)}(R_b)

    R_b is the return of finishing the episode from branch b with the current policies. A group
    of one branch, or whose branches all returned the same, gives 0.
    """
    return normalise_in_groups(returns, groups, n_groups, scale=options.scale, eps=options.eps)


def state_advantages(
    returns: np.ndarray, states: np.ndarray, options: AdvantageOptions
) -> np.ndarray:
    """Information-state groups (GiGPO's anchor states): rows whose prompt, i.e. information
    state, is identical across the batch are one group; A_state = norm_{rows of state}(return)."""
    codes, n_codes = dense_codes(states)
    return normalise_in_groups(returns, codes, n_codes, scale=options.scale, eps=options.eps)


_Estimator = Callable[[TurnTable, AdvantageOptions], np.ndarray]
_ESTIMATOR_FUNCTIONS: dict[str, _Estimator] = {
    "marshal": _marshal,
    "marshal_reference": _marshal_reference,
    "no_turn_level": _no_turn_level,
    "no_agent_norm": _no_agent_norm,
    "grpo": _grpo,
}
# Estimators over a table of branches (tree sampling) rather than one row per turn.
TREE_ESTIMATORS = ("at_grpo",)
ESTIMATORS: tuple[str, ...] = (*_ESTIMATOR_FUNCTIONS, *TREE_ESTIMATORS)
# One undiscounted return per trajectory (or per branch): gamma must be 1.
TRAJECTORY_LEVEL_ESTIMATORS = ("no_turn_level", "grpo", "at_grpo")
ESTIMATOR_HELP: dict[str, str] = {
    "marshal": "turn-level return, normalised per (game, seat) over turns",
    "marshal_reference": "the MARSHAL code's five steps (reward centring, whitening, turn-level "
    "return, per-seat distinct-value baseline, token-weighted whitening)",
    "no_turn_level": "trajectory-level return, normalised per (game, seat) over trajectories",
    "no_agent_norm": "turn-level return, normalised per game (seats pooled) over turns",
    "grpo": "trajectory-level return, normalised per game or per `group` column over trajectories",
    "at_grpo": "AT-GRPO: K replies sampled at the same state (tree sampling), each branch's return "
    "normalised within its (game, episode, seat, turn) group",
}


def compute_advantages(
    turns: pd.DataFrame | dict[str, Any], estimator: str = DEFAULT_ESTIMATOR, **options: Any
) -> np.ndarray:
    """One advantage per row of `turns`, in row order (float64).

    estimator: one of ESTIMATORS. options: gamma (discount per turn of the seat, in [0, 1], default
    1; trajectory-level estimators accept only 1), eps (default 1e-6), scale ("mean_std", default,
    or "mean"). Bad input raises MarsError with a one-line message.
    """
    function = _ESTIMATOR_FUNCTIONS.get(estimator)
    if function is None and estimator not in TREE_ESTIMATORS:
        raise MarsError(
            f"unknown advantage estimator {estimator!r}; choose one of: {', '.join(ESTIMATORS)}"
        )
    parsed = _parse_options(options)
    switched = sorted(set(options) & set(SWITCH_NAMES))
    if switched and estimator != SWITCHED_ESTIMATOR:
        raise MarsError(
            f"{', '.join(switched)}: only {SWITCHED_ESTIMATOR} takes the code's ablation switches "
            f"(the other estimators name their ablations: {', '.join(ESTIMATORS)})"
        )
    if not parsed.turn_level and parsed.gamma != 1.0:
        raise MarsError(
            f"turn_level=false puts one return on every turn; gamma must be 1, got {parsed.gamma}"
        )
    if estimator in TRAJECTORY_LEVEL_ESTIMATORS and parsed.gamma != 1.0:
        raise MarsError(
            f"estimator {estimator!r} uses one undiscounted return per trajectory; "
            f"gamma must be 1, got {parsed.gamma}"
        )
    if estimator in TREE_ESTIMATORS:
        return _tree_advantages(turns, parsed)
    if parsed.scale == STATE_STD:
        raise MarsError(f"scale {STATE_STD} is an at_grpo option (tree groups within a state)")
    table = load_turn_table(
        turns,
        with_tokens=estimator == "marshal_reference",
        with_group=estimator == "grpo",
        with_state=parsed.state_weight > 0,
    )
    if table.n_rows == 0:
        return np.zeros(0, dtype=np.float64)
    advantages = function(table, parsed)
    if parsed.state_weight > 0:
        assert table.state is not None
        returns = _turn_returns(table, table.reward, parsed.gamma)
        advantages = advantages + parsed.state_weight * state_advantages(
            returns, table.state, parsed
        )
    return table.to_rows(advantages)


def needs_state(options: dict[str, Any]) -> bool:
    """Whether these estimator options read the `state` column (information-state keys)."""
    return options.get("state_weight", 0) > 0 or options.get("scale") == STATE_STD


def _tree_advantages(turns: Any, options: AdvantageOptions) -> np.ndarray:
    """at_grpo over a table of branches (rows may repeat a (game, episode, seat, turn) key)."""
    by_state = options.scale == STATE_STD
    table = load_branch_table(turns, with_state=options.state_weight > 0 or by_state)
    if table.n_rows == 0:
        return np.zeros(0, dtype=np.float64)
    if by_state:
        assert table.state is not None
        advantages = state_scaled_tree_advantages(
            table.reward, table.group, table.n_groups, table.state, options.eps
        )
        options = replace(options, scale="mean_std")  # for the state groups' own term below
    else:
        advantages = at_grpo_advantages(table.reward, table.group, table.n_groups, options)
    if options.state_weight > 0:
        assert table.state is not None
        advantages = advantages + options.state_weight * state_advantages(
            table.reward, table.state, options
        )
    return table.to_rows(advantages)


def state_scaled_tree_advantages(
    returns: np.ndarray, groups: np.ndarray, n_groups: int, states: np.ndarray, eps: float
) -> np.ndarray:
    """at_grpo with scale "state_std": A(b) = (R_b - mean_group) / std_state.

    The tree group's mean (one deal, one state) removes what the deal's hidden cards add to every
    branch's return; the divisor is the spread of those centred values over every branch of the
    same information state in the batch. A group's own std would turn each deal into a vote of
    equal weight whatever the stakes (in Kuhn a Queen facing a bet: call +2 against a Jack, -2
    against a King, fold -1 either way: one vote each way, while calling is worth +1 on average);
    one positive divisor per state keeps each state's expected direction and still puts every
    state on the same scale.
    """
    centred = normalise_in_groups(returns, groups, n_groups, scale="mean", eps=eps)
    codes, n_codes = dense_codes(states)
    counts = np.bincount(codes, minlength=n_codes)
    spreads = np.sqrt(np.bincount(codes, weights=centred * centred, minlength=n_codes) / counts)
    return centred / np.where(spreads < eps, 1.0, spreads)[codes]


def _parse_options(options: dict[str, Any]) -> AdvantageOptions:
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise MarsError(unknown_name("advantage option", ", ".join(unknown), OPTION_NAMES))
    defaults = AdvantageOptions()
    gamma = _real_option(options, "gamma", defaults.gamma)
    if not 0.0 <= gamma <= 1.0:
        raise MarsError(f"gamma must be in [0, 1], got {gamma}")
    eps = _real_option(options, "eps", defaults.eps)
    if not eps > 0.0:
        raise MarsError(f"eps must be > 0, got {eps}")
    scale = options.get("scale", defaults.scale)
    if scale not in (*SCALES, STATE_STD):
        raise MarsError(f"scale must be one of {', '.join(SCALES)}, {STATE_STD}, got {scale!r}")
    state_weight = _real_option(options, "state_weight", defaults.state_weight)
    if state_weight < 0.0:
        raise MarsError(f"state_weight must be >= 0, got {state_weight}")
    switches = {}
    for name in SWITCH_NAMES:
        value = options.get(name, True)
        if not isinstance(value, bool):
            raise MarsError(f"{name} must be true or false, got {value!r}")
        switches[name] = value
    return AdvantageOptions(
        gamma=gamma, eps=eps, scale=scale, state_weight=state_weight, **switches
    )


def _real_option(options: dict[str, Any], name: str, default: float) -> float:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise MarsError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _turn_returns(table: TurnTable, rewards: np.ndarray, gamma: float) -> np.ndarray:
    return suffix_returns(rewards, table.starts, table.lengths, gamma)


def _trajectory_level(
    table: TurnTable, groups: np.ndarray, n_groups: int, options: AdvantageOptions
) -> np.ndarray:
    """Normalise one return per trajectory within per-trajectory `groups`; spread it to turns."""
    totals = np.bincount(table.trajectory, weights=table.reward, minlength=table.n_trajectories)
    per_trajectory = normalise_in_groups(
        totals, groups, n_groups, scale=options.scale, eps=options.eps
    )
    return per_trajectory[table.trajectory]


def _group_codes(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes 0..n-1 of the tuples formed by equal-length integer code arrays."""
    combined = keys[0]
    for key in keys[1:]:
        combined = combined * (int(key.max()) + 1) + key
    return dense_codes(combined)


def _codes_per_slot(table: TurnTable, *per_trajectory_keys: np.ndarray) -> tuple[np.ndarray, int]:
    codes, n_codes = _group_codes(*per_trajectory_keys)
    return codes[table.trajectory], n_codes
