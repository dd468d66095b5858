"""A tiny MAS training run the tests make for themselves: reasoner_tool on arithmetic, the
embedded tiny model, a few seconds on one core (mas_testkit.py holds the MAS evaluation tests'
pieces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.runstore import RunDir
from train_backend.mas.config import WorkflowTrainConfig

PER_ROLE = {"tool": "coder", "reasoner": "thinker"}


def tiny_workflow_config(**overrides: Any) -> WorkflowTrainConfig:
    settings = {
        "workflow_options": {"rounds": 1, "code_seconds": 2.0},
        "problems_per_step": 2,
        "heldout_problems": 2,
        "branches": 2,
        "steps": 2,
        "eval_every": 2,
        "save_every": 2,
        "learning_rate": 1e-3,
        "warmup_steps": 0,
        "kl_coef": 0.0,
        "entropy_coef": 0.05,  # a gradient even when every branch returns the same
        "temperature": 1.0,
        "max_new_tokens": 6,
        "prompt_style": "compact",
    }
    return WorkflowTrainConfig(**(settings | overrides))


def train_tiny_workflow(path: Path, config: WorkflowTrainConfig) -> dict[str, Any]:
    """Train `config` into the run directory `path` (resuming what is there); its summary."""
    from train_backend.mas import trainer

    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="mas")
    return trainer.train_workflow(config, run, command=["test"], log=lambda _: None)
