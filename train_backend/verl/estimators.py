"""The MARSHAL advantage estimators in verl's registry, delegating to `compute_advantages`.

Registered under the names in `names.VERL_ESTIMATOR_NAMES` (marshal, no_turn_level,
no_agent_norm, marshal_reference, mars_grpo, at_grpo). verl calls them with the batch's token
tensors; the game, seat and turn of each row come from the mars trainer through
`turns.current_turn_rows`. Options come from verl's `algorithm` section: `gamma`, and
`norm_adv_by_std_in_grpo` (false means centring only, our `scale="mean"`); marshal_reference's
ablation switches and `state_weight` come from the `MARS_ESTIMATOR_SWITCHES` variable the launcher
puts in every worker's environment.

`at_grpo` reads verl's `index` too: the trainer has set each branch's `uid` to its tree group
key, so the groups verl hands over are the tree's; the estimator refuses a batch where they are
not (a sample that is no branch, or a uid that is not its group key).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from core.errors import MarsError
from train_backend.advantage import TREE_ESTIMATORS
from train_backend.verl import names
from train_backend.verl.overrides import ESTIMATOR_SWITCHES_ENV
from train_backend.verl.turns import TurnRows, current_turn_rows, token_advantages

VerlEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def estimator_options(config: Any) -> dict[str, Any]:
    """Our estimator options from verl's algorithm config (an AlgoConfig or a mapping)."""
    if config is None:
        return {}
    gamma = config.get("gamma", 1.0)
    by_std = config.get("norm_adv_by_std_in_grpo", True)
    switches = json.loads(os.environ.get(ESTIMATOR_SWITCHES_ENV) or "{}")
    return {"gamma": float(gamma), "scale": "mean_std" if by_std else "mean", **switches}


def check_tree_uids(rows: TurnRows, index: Any) -> None:
    """Every sample is a branch whose verl uid is its tree group key (episode, seat, turn)."""
    if index is None:
        raise MarsError("at_grpo needs verl's uid (index) of every sample: none was given")
    uids = list(index)
    for row, group in enumerate(rows.row_tree_groups()):
        if rows.padding[row]:
            continue
        if group is None:
            raise MarsError(
                f"batch row {row} is not a tree branch: at_grpo needs the agent loop's tree "
                "samples (a dataset row with `branches`; mars train --estimator at_grpo writes it)"
            )
        if str(uids[row]) != group:
            raise MarsError(
                f"batch row {row}: verl's uid {uids[row]!r} is not its tree group {group!r}"
            )


def make_verl_estimator(estimator: str) -> VerlEstimator:
    def verl_estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **_: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = current_turn_rows(names.VERL_ESTIMATOR_NAMES[estimator])
        if estimator in TREE_ESTIMATORS:
            check_tree_uids(rows, index)
        advantages = token_advantages(
            estimator, token_level_rewards, response_mask, rows, **estimator_options(config)
        )
        # As in verl's outcome estimators (GRPO, RLOO), the returns are the advantages: no critic.
        return advantages, advantages

    verl_estimator.__name__ = f"mars_{estimator}_advantage"
    verl_estimator.__qualname__ = verl_estimator.__name__
    return verl_estimator


def register_estimators() -> None:
    """Register every estimator once per process (importing this module twice is harmless)."""
    for estimator, verl_name in names.VERL_ESTIMATOR_NAMES.items():
        existing = ADV_ESTIMATOR_REGISTRY.get(verl_name)
        if existing is None:
            register_adv_est(verl_name)(make_verl_estimator(estimator))
        elif getattr(existing, "__module__", None) != __name__:
            raise MarsError(
                f"verl already has an advantage estimator named '{verl_name}' "
                f"({existing.__module__}); the MARSHAL one cannot take that name"
            )


register_estimators()
