"""Named bundles of training settings. `marshal` is every choice of the released MARSHAL code
(thu-nics/MARSHAL 2db0222, the generalist run); docs/parity.md gives the source of each value.

A preset sits between the defaults and everything the user gives: defaults < preset < the
resumed run's stored config < `--config FILE` < flags.
"""

from __future__ import annotations

from typing import Any

from core.errors import MarsError
from core.names import unknown_name

MARSHAL_PRESET: dict[str, Any] = {
    # estimator and loss
    "estimator": "marshal_reference",
    "estimator_options": {},
    "clip_ratio": 0.2,
    "dual_clip": 1.4,  # 1 + 2 x clip
    "kl_coef": 0.2,
    "ppo_epochs": 1,
    "grad_clip": 1.0,
    # optimiser and schedule
    "learning_rate": 1e-6,
    "lr_schedule": "cosine",
    "min_lr_ratio": 0.0,
    "warmup_steps": 10,
    "weight_decay": 0.05,
    "adam_betas": [0.9, 0.95],
    # rollout
    "games": ["tic_tac_toe", "kuhn_poker", "mini_hanabi"],
    "steps": 200,
    "games_per_step": 192,
    "group_size": 1,
    "temperature": 0.6,
    "top_p": 0.99,
    "top_k": 100,
    "max_new_tokens": 4096,
    "max_game_tokens": 32768,
    "prompt_style": "full",
    "sample_unit": "conversation",
    "invalid": "penalty",
    "save_every": 20,
    # games, rewards and parsing (games.rules)
    "turn_rewards": "step",
    "invalid_outcome": "reference",
    "length_penalty": "reference",
    "leduc_deals": "rank_triples",
    "parse_mode": "strict",
}

# Stronger-MAS (AT-GRPO; PettingLLMs' training scripts and configs; docs/mas_training.md):
# for `mars train-mas`. 200 steps of 32 environments, K = 4 with greedy continuation, 4 turns (a
# turn is one call per role: `max_turns` / `rounds` 4), 4096 prompt / 2048 response tokens, lr
# 5e-6, no KL, one PPO epoch, clip 0.2. Group filters by domain: stateful drops the half of the
# groups with the lowest mean, code the equal-reward groups (dapo), math none. Sampling: T 1.5 in
# the stateful (puzzle) environments, 1.0 in code and math, top-p 0.9, top-k 20 (their evaluation
# uses T 0 in puzzles, 0.6 in code and math: pass it to `mars eval --temperature`). Departures:
# the branch's return (the role's rewards from that call on) is grouped, not the turn's immediate
# reward; no dual clip (their loss has none); code trains on a JSONL file of yours (`train_set:
# code` + `train_file`: their CodeContests + APPS mix is not downloaded here).
_STRONGER_MAS_COMMON: dict[str, Any] = {
    "estimator": "at_grpo",
    "estimator_options": {},
    "steps": 200,
    "problems_per_step": 32,
    "branches": 4,
    "continuation": "greedy",
    "learning_rate": 5e-6,
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "kl_coef": 0.0,
    "ppo_epochs": 1,
    "clip_ratio": 0.2,
    "dual_clip": None,
    "max_new_tokens": 2048,
    "max_game_tokens": 4096 + 2048,  # a call's prompt and its reply (each call a fresh chat)
    "top_p": 0.9,
    "top_k": 20,
}
STRONGER_MAS_PLAN_PRESET: dict[str, Any] = {
    **_STRONGER_MAS_COMMON,
    "workflow": "plan_tool",
    "workflow_options": {"max_turns": 4},
    "train_set": "plan_path",
    "temperature": 1.5,
    "group_filter": "mean",
    "group_filter_ratio": 0.5,
}
STRONGER_MAS_CODE_PRESET: dict[str, Any] = {
    **_STRONGER_MAS_COMMON,
    "workflow": "code_tester",
    "workflow_options": {"max_turns": 4},
    "train_set": "code",
    "temperature": 1.0,
    "group_filter": "dapo",
    "group_filter_ratio": 0.2,
}
STRONGER_MAS_MATH_PRESET: dict[str, Any] = {
    **_STRONGER_MAS_COMMON,
    "workflow": "reasoner_tool",
    "workflow_options": {"rounds": 4},
    "train_set": "math",
    "temperature": 1.0,
    "group_filter": "none",
}

PRESETS: dict[str, dict[str, Any]] = {"marshal": MARSHAL_PRESET}
# The presets of `mars train-mas` (their fields are the workflow trainer's).
WORKFLOW_PRESETS: dict[str, dict[str, Any]] = {
    "stronger_mas_plan": STRONGER_MAS_PLAN_PRESET,
    "stronger_mas_code": STRONGER_MAS_CODE_PRESET,
    "stronger_mas_math": STRONGER_MAS_MATH_PRESET,
}
NO_PRESET = "none"


def preset_settings(name: str | None, *, workflow: bool = False) -> dict[str, Any]:
    """The settings of preset `name` ({} for None or "none"); one error line for an unknown name.
    `workflow`: the presets of `mars train-mas` instead of `mars train`'s."""
    if name is None or name == NO_PRESET:
        return {}
    presets = WORKFLOW_PRESETS if workflow else PRESETS
    if name not in presets:
        raise MarsError(unknown_name("preset", name, [*presets, NO_PRESET]))
    return {key: _copy(value) for key, value in presets[name].items()}


def checked_preset(name: str | None, *, workflow: bool = False) -> str | None:
    """A config's `preset` field as validated: None for None or "none", else a known preset's
    name (ValueError naming the choices for another). `workflow`: as in `preset_settings`."""
    presets = WORKFLOW_PRESETS if workflow else PRESETS
    if name is not None and name != NO_PRESET and name not in presets:
        raise ValueError(unknown_name("preset", name, [*presets, NO_PRESET]))
    return None if name == NO_PRESET else name


def _copy(value: Any) -> Any:
    if isinstance(value, list | dict):
        return type(value)(value)
    return value
