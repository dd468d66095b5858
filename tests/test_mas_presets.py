"""`mars train-mas --preset`: Stronger-MAS's settings, under the config file and the flags, checked
end to end by verl's dry run (its Hydra config composed and validated, the dataset written)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from conftest import run_mars

from core.tiny_model import ensure_tiny_model
from harness.puzzles import level_from_ref, new_state


def test_a_preset_sits_under_the_flags_and_an_unknown_one_is_one_line() -> None:
    shown = run_mars("train-mas", "--preset", "stronger_mas_plan", "--lr", "1e-4", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    config = json.loads(shown.stdout)
    assert config["workflow"] == "plan_tool" and config["workflow_options"] == {"max_turns": 4}
    assert (config["temperature"], config["top_p"], config["top_k"]) == (1.5, 0.9, 20)
    assert (config["branches"], config["problems_per_step"], config["kl_coef"]) == (4, 32, 0.0)
    assert config["group_filter"] == "mean" and config["learning_rate"] == 1e-4  # the flag wins
    bad = run_mars("train-mas", "--preset", "stronger", "--dry-run")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "unknown preset 'stronger' (did you mean 'stronger_mas_" in bad.stderr
    assert "known: none, stronger_mas_code, stronger_mas_math, stronger_mas_plan" in bad.stderr


def test_the_planning_preset_passes_verls_dry_run_with_puzzle_rows(tmp_path: Path) -> None:
    config = tmp_path / "small.yaml"
    config.write_text("max_new_tokens: 256\nmax_game_tokens: 2048\nheldout_problems: 4\n")
    run_dir = tmp_path / "run"
    shown = run_mars(
        "train-mas", "--trainer", "verl", "--device", "cpu", "--model", str(ensure_tiny_model()),
        "--preset", "stronger_mas_plan", "--train-set", "plan_path_5x5", "--steps", "2",
        "--problems-per-step", "2", "--config", str(config), "--run-dir", str(run_dir),
        "--dry-run",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-2000:]
    command = (run_dir / "verl" / "command.sh").read_text()
    for override in (
        "actor_rollout_ref.rollout.temperature=1.5",
        "actor_rollout_ref.rollout.top_k=20",
        "actor_rollout_ref.actor.optim.lr=5e-06",
        "actor_rollout_ref.actor.use_kl_loss=false",
        '"method": "mean", "ratio": 0.5',
    ):
        assert override in command
    rows = pd.read_parquet(run_dir / "verl" / "data" / "games.parquet")
    assert len(rows) == 4 and set(rows["workflow"]) == {"plan_tool"}
    assert set(rows["kind"]) == {"puzzle"}
    level = level_from_ref(json.loads(rows["metadata"].iloc[0])["environment"])
    assert level.split == "train" and level.params["size"] == 5
    assert new_state(level).copy().apply(list(level.solution)).solved
