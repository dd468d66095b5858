"""Named bundles of training settings. `marshal` is every choice of the released MARSHAL code
(thu-nics/MARSHAL 2db0222, the generalist run); docs/parity.md gives the source of each value.

A preset sits between the defaults and everything the user gives: defaults < preset < the
resumed run's stored config < `--config FILE` < flags.
"""

from __future__ import annotations

from typing import Any

from core.errors import MarsError

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

PRESETS: dict[str, dict[str, Any]] = {"marshal": MARSHAL_PRESET}
NO_PRESET = "none"


def preset_settings(name: str | None) -> dict[str, Any]:
    """The settings of preset `name` ({} for None or "none"); one error line for an unknown name."""
    if name is None or name == NO_PRESET:
        return {}
    if name not in PRESETS:
        known = ", ".join([*PRESETS, NO_PRESET])
        raise MarsError(f"unknown preset {name!r}; known: {known}")
    return {key: _copy(value) for key, value in PRESETS[name].items()}


def _copy(value: Any) -> Any:
    if isinstance(value, list | dict):
        return type(value)(value)
    return value
