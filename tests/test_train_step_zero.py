"""`mars train --trainer local` with in-training evaluation evaluates the start policy as step 0
(so a policy panel has a start column and the curves a first point), once: a run killed before
its first checkpoint, or between step 0's two files, and a run resumed from a checkpoint keep one
step-0 line and one set of step-0 records. Also: the collapse signals leave forced branches out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core import branch_log
from core.runstore import RunDir
from train_backend.config import TrainConfig
from train_backend.local import runlog
from train_backend.local.trainer import LocalTrainer, train_local

pytestmark = pytest.mark.slow  # trains the tiny model


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _config(**overrides: Any) -> TrainConfig:
    settings: dict[str, Any] = {
        "games": ["kuhn_poker"],
        "steps": 2,
        "games_per_step": 2,
        "max_new_tokens": 8,
        "eval_every": 2,
        "save_every": 2,
        "eval_episodes": 1,
        "eval_opponents": {"kuhn_poker": ["random"]},
        "eval_exploitability": {"kuhn_poker": 1},
    }
    return TrainConfig.for_local(**(settings | overrides))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(path: Path) -> RunDir:
    return RunDir.resolve(out=None, run_dir=path, kind="train", slug="t")


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The steps the trainer evaluates, in order."""
    steps: list[int] = []
    real = LocalTrainer._evaluate

    def spy(self: LocalTrainer, step: int) -> Any:
        steps.append(step)
        return real(self, step)

    monkeypatch.setattr(LocalTrainer, "_evaluate", spy)
    return steps


def _interrupt_at_step(monkeypatch: pytest.MonkeyPatch, step: int) -> Any:
    """Ctrl-C when the trainer starts rolling out `step`; returns the real rollout."""
    real = LocalTrainer.rollout

    def rollout(self: LocalTrainer, at: int) -> Any:
        if at == step:
            raise KeyboardInterrupt
        return real(self, at)

    monkeypatch.setattr(LocalTrainer, "rollout", rollout)
    return real


def test_step_zero_is_the_start_evaluated_once_through_a_kill_and_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evaluated: list[int]
) -> None:
    run_dir = tmp_path / "run"
    quiet = {"command": ["mars", "train"], "log": lambda _line: None}
    # Killed while playing step 2: step 1 ran, no checkpoint was saved (save_every 2).
    real_rollout = _interrupt_at_step(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train_local(_config(), _run(run_dir), **quiet)
    assert evaluated == [0]
    rows = _lines(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1]
    start = rows[0]
    assert "loss" not in start and "reward_mean" not in start  # no update, no rollout
    assert 0 < start["exploitability/kuhn_poker"] <= 1
    shares = [key for key in start if key.startswith("policy/kuhn_poker/")]
    assert len(shares) == 24  # the start column: 12 information states x 2 actions
    assert start["exploitability_avg/kuhn_poker/policies"] == 1
    records = run_dir / "evals" / "step_0.jsonl"
    written = records.read_bytes()
    assert [r["step"] for r in _lines(records)] == [0, 0]  # one episode from each seat

    # The rerun starts again from the start (no checkpoint): step 0 is kept, not redone.
    monkeypatch.setattr(LocalTrainer, "rollout", real_rollout)
    evaluated.clear()
    train_local(_config(), _run(run_dir), **quiet)
    assert evaluated == [2]
    rows = _lines(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert rows[0] == start and records.read_bytes() == written
    assert rows[2]["exploitability_avg/kuhn_poker/policies"] == 2  # the start's policy and step 2's

    # Resumed from the step-2 checkpoint for one more step: step 0 stays single.
    evaluated.clear()
    train_local(_config(steps=3), _run(run_dir), **quiet)
    assert evaluated == [3]
    assert [row["step"] for row in _lines(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    assert records.read_bytes() == written


def test_a_kill_between_step_zeros_records_and_its_line_redoes_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evaluated: list[int]
) -> None:
    run_dir = tmp_path / "run"
    quiet = {"command": ["mars", "train"], "log": lambda _line: None}
    real_append = runlog.append_lines

    def killed_before_the_metrics_line(path: Path, rows: list[dict[str, Any]]) -> None:
        if path.name == runlog.METRICS_FILE and rows and rows[0]["step"] == 0:
            raise KeyboardInterrupt
        real_append(path, rows)

    monkeypatch.setattr(runlog, "append_lines", killed_before_the_metrics_line)
    with pytest.raises(KeyboardInterrupt):
        train_local(_config(steps=1, save_every=1), _run(run_dir), **quiet)
    assert len(_lines(run_dir / "evals" / "step_0.jsonl")) == 2
    assert not (run_dir / "metrics.jsonl").exists()

    monkeypatch.setattr(runlog, "append_lines", real_append)
    train_local(_config(steps=1, save_every=1), _run(run_dir), **quiet)
    assert evaluated == [0, 0, 1]  # step 0 redone once, as it had no line
    assert [row["step"] for row in _lines(run_dir / "metrics.jsonl")] == [0, 1]
    assert len(_lines(run_dir / "evals" / "step_0.jsonl")) == 2  # replaced, not appended to


def test_without_in_training_evaluation_there_is_no_step_zero(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train_local(
        _config(steps=1, save_every=1, eval_every=0),
        _run(run_dir),
        command=["mars", "train"],
        log=lambda _line: None,
    )
    assert [row["step"] for row in _lines(run_dir / "metrics.jsonl")] == [1]
    assert not (run_dir / "evals").exists()


def test_the_collapse_signals_count_sampled_branches_and_forced_ones_apart() -> None:
    def branch(group: int, index: int, action: str, forced: bool) -> dict[str, Any]:
        return branch_log.branch_line(
            step=1, game="kuhn_poker", episode=group, seat=0, turn=0, state="s", branch=index,
            reply=f"<answer>{action}</answer>", action=action, legal=True, ret=1.0,
            advantage=0.0, trained=False, forced=forced,
        )  # fmt: skip

    # Both groups sampled <BET> twice; all-actions rewrote a third branch of each to <PASS>.
    lines = [branch(g, i, "<BET>", False) for g in (1, 2) for i in (0, 1)]
    lines += [branch(g, 2, "<PASS>", True) for g in (1, 2)]
    signals = branch_log.sampled_collapse_signals(lines)
    assert signals["branches/action_entropy_bits"] == 0.0  # the policy always bet
    assert branch_log.collapse_signals(lines)["branches/action_entropy_bits"] > 0.9
    assert signals["branches/forced"] == 2 and signals["branches/groups"] == 2
    assert branch_log.sampled_collapse_signals([]) == {}
