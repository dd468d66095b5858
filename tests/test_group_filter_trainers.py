"""Group filtering and failed replays in the CPU trainers: the game trainer and the workflow
trainer hand the update the kept samples only, scored among themselves, and report the drops.

The game trainer's step is tree-sampled on Kuhn with scripted replies (test_tree_rollout.py's
kit) and updated on the tiny model; the workflow trainer runs one real step of the tiny model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
import torch
from test_tree_rollout import always_bet, scripted_responder
from workflow_testkit import tiny_workflow_config, train_tiny_workflow

from core.errors import EndpointError, MarsError
from core.runstore import RunDir
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig
from train_backend.group_filter import GroupFilter, select_step
from train_backend.local import trainer as game_trainer
from train_backend.local.rollout import StepRollout
from train_backend.local.tree import TreeRollout
from train_backend.mas import rollout as workflow_rollout
from train_backend.mas import trainer as workflow_trainer
from train_backend.mas.data import Problem
from train_backend.mas.rollout import Call, Run


def every_other(legal: list[str], index: int) -> str:
    return legal[index % len(legal)]


def one_game_trainer_step(tmp_path, monkeypatch, choose, **settings: Any):
    """One step of the CPU trainer on Kuhn, tree-sampled (K = 2) with `choose`'s replies; what
    the update was given (samples, advantages), the step's rollout and its metrics line."""
    torch.set_num_threads(1)
    config = TrainConfig.for_local(
        games=["kuhn_poker"], estimator="at_grpo", tree={"branches": 2}, games_per_step=6,
        steps=1, max_new_tokens=16, eval_every=0, save_every=10, **settings,
    )  # fmt: skip
    played: list[StepRollout] = []
    real_step = game_trainer.play_tree_step

    async def scripted_step(responder, *args: Any, **kwargs: Any) -> StepRollout:
        rollout = await real_step(scripted_responder(responder.policy, choose), *args, **kwargs)
        played.append(rollout)
        return rollout

    given: list[tuple[list, np.ndarray]] = []

    def spying_update(config, policy, reference, optimizer, samples, advantages, step):
        given.append((list(samples), np.array(advantages)))
        return game_trainer.UpdateStats(sequences=len(samples))

    monkeypatch.setattr(game_trainer, "play_tree_step", scripted_step)
    monkeypatch.setattr(game_trainer, "update_policy", spying_update)
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    trainer = game_trainer.LocalTrainer(config, run, log=lambda _line: None)
    trainer.load()
    trainer.train()
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    (samples, advantages), rollout = given[0], played[0]
    return samples, advantages, rollout, metrics


def test_a_group_whose_replay_failed_is_left_out_of_the_game_trainers_update(
    tmp_path, monkeypatch
) -> None:
    real_sample = TreeRollout._sample

    async def failing(self, prompt_ids, count):
        if count == 1:  # every main-line turn is branched: only replays sample one reply
            raise EndpointError("the rollout server went away", retries=3)
        return await real_sample(self, prompt_ids, count)

    monkeypatch.setattr(TreeRollout, "_sample", failing)
    samples, _, rollout, metrics = one_game_trainer_step(tmp_path, monkeypatch, always_bet)
    # Everyone bets: seat 0's replays need seat 1's reply, which fails; seat 1's end the game.
    failed = [row["replay_failed"] for row in rollout.rows]
    assert failed == [row["seat"] == 0 for row in rollout.rows] and any(failed)
    assert metrics["tree_replay_failed_groups"] == 6  # one per game
    assert metrics["group_filter/dropped_groups/replay_failed"] == 6
    assert metrics["group_filter/kept_samples"] == len(samples) == 12
    assert {s.seat for s in samples} == {1}
    kept = [i for i, row in enumerate(rollout.rows) if not row["replay_failed"]]
    assert [s.completion_ids for s in samples] == [rollout.samples[i].completion_ids for i in kept]


def test_the_game_trainer_updates_on_the_kept_groups_scored_among_themselves(
    tmp_path, monkeypatch
) -> None:
    samples, advantages, rollout, metrics = one_game_trainer_step(
        tmp_path, monkeypatch, every_other, group_filter="mean", group_filter_ratio=0.5
    )
    selection = select_step(rollout.rows, GroupFilter("mean", 0.5))
    assert selection is not None and 0 < selection.keep.sum() < len(rollout.rows)
    kept = np.flatnonzero(selection.keep)
    assert [s.completion_ids for s in samples] == [rollout.samples[i].completion_ids for i in kept]
    table = {c: [rollout.rows[i][c] for i in kept] for c in ("game", "episode", "seat", "turn")}
    table["reward"] = [rollout.rows[i]["reward"] for i in kept]
    assert advantages == pytest.approx(compute_advantages(table, "at_grpo"))
    assert metrics["group_filter/dropped_groups/mean"] == selection.groups // 2
    assert metrics["group_filter/kept_groups"] == selection.groups - selection.groups // 2


def test_the_workflow_trainer_updates_each_policy_on_its_kept_samples(
    tmp_path, monkeypatch
) -> None:
    played: list[StepRollout] = []
    real_step = workflow_trainer.play_workflow_step

    async def recording_step(*args: Any, **kwargs: Any) -> StepRollout:
        played.append(await real_step(*args, **kwargs))
        return played[-1]

    given: list[list] = []
    real_update = workflow_trainer.update_policy

    def spying_update(config, policy, reference, optimizer, samples, advantages, step):
        given.append(list(samples))
        return real_update(config, policy, reference, optimizer, samples, advantages, step)

    monkeypatch.setattr(workflow_trainer, "play_workflow_step", recording_step)
    monkeypatch.setattr(workflow_trainer, "update_policy", spying_update)
    config = tiny_workflow_config(steps=1, eval_every=0, group_filter="mean")
    train_tiny_workflow(tmp_path / "run", config)
    rollout = played[0]
    selection = select_step(rollout.rows, GroupFilter("mean"))
    assert selection is not None
    kept = [rollout.samples[i] for i in np.flatnonzero(selection.keep)]
    assert given == [kept] and 0 < len(kept) < len(rollout.samples)
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert metrics["policy/policy/samples"] == len(kept)
    assert metrics["group_filter/dropped_groups/mean"] == selection.groups // 2


def test_a_workflow_replay_that_ends_some_runs_early_stops_the_step(monkeypatch) -> None:
    """The K runs of a call replay the same calls before it: all must reach it, or none."""
    lengths = iter([2, 2, 2, 1])  # point 0: two runs of two calls; point 1: one run ends early

    async def fake_run(workflow, problem, roles, config, prefix=(), key=()) -> Run:
        calls = [Call("solver", i, (i,), (i,), "x") for i in range(next(lengths))]
        return Run(calls=calls, rewards={("solver", 0): 1.0})

    monkeypatch.setattr(workflow_rollout, "run_workflow", fake_run)
    problem = Problem("p0", "What is 2 + 3?", "5", "test")
    tree = workflow_rollout.tree_sample(
        "single", problem, 0, {}, {}, branches=2, continuation="greedy",
        rng=np.random.default_rng(0),
    )  # fmt: skip
    with pytest.raises(MarsError, match="replay diverged at call 1 on problem p0: 1 of 2 runs"):
        asyncio.run(tree)
