"""at_grpo on verl's own trainer, for real, on this machine's CPU.

`mars train --trainer verl --device cpu --estimator at_grpo`: one step of Kuhn poker with the
format-trained tiny model, three branches at every policy turn. verl's `main_ppo` with Ray,
FSDP2 on gloo and the CPU rollout serving the agent loop's K requests per turn; the mars trainer
sets each branch's `uid` to its tree group before verl scores it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from conftest import run_mars
from model_testkit import kuhn_model

from train_backend.advantage import compute_advantages
from train_backend.verl.tree_loop import group_key

BRANCHES = 3
CONFIG = f"""\
prompt_style: full
invalid: penalty
games_per_step: 2
max_new_tokens: 20
learning_rate: 0.001
warmup_steps: 0
kl_coef: 0.0
temperature: 1.0
save_every: 1
tree:
  branches: {BRANCHES}
"""


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    root = tmp_path_factory.mktemp("verl-tree")
    config = root / "tree.yaml"
    config.write_text(CONFIG)
    run = root / "run"
    started = time.perf_counter()
    result = run_mars(
        "train", "--trainer", "verl", "--device", "cpu", "--model", str(kuhn_model()),
        "--games", "kuhn_poker", "--steps", "1", "--estimator", "at_grpo",
        "--config", str(config), "--run-dir", str(run), timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return run, time.perf_counter() - started


def test_a_tree_sampled_verl_step_scores_each_branch_in_its_group(tree_run):
    run, seconds = tree_run
    print(f"1 at_grpo CPU verl step in {seconds:.0f} s")
    turns = [json.loads(line) for line in (run / "verl/turns/step_1.jsonl").open()]
    groups: dict[str, list[dict]] = defaultdict(list)
    for turn in turns:
        # verl's uid of every sample is its tree group: (episode, seat, turn)
        assert turn["uid"] == group_key(turn["episode"], turn["seat"], turn["turn"])
        groups[turn["uid"]].append(turn)
    assert len({turn["episode"] for turn in turns}) == 2  # both games of the step
    assert len({turn["row"] for turn in turns}) == len(turns)  # one sample per branch
    assert {len(group) for group in groups.values()} == {BRANCHES}  # K samples share each uid
    assert {turn["seat"] for turn in turns} == {0, 1}  # self-play: both seats branch
    for group in groups.values():
        advantages = [turn["advantage"] for turn in group]
        assert sum(advantages) == pytest.approx(0.0, abs=1e-5)
        if len({turn["reward"] for turn in group}) == 1:  # equal returns: no signal
            assert advantages == pytest.approx([0.0] * BRANCHES, abs=1e-6)
    table = {c: [t[c] for t in turns] for c in ("game", "episode", "seat", "turn", "reward")}
    expected = compute_advantages(table, "at_grpo")
    assert [turn["advantage"] for turn in turns] == pytest.approx(expected, abs=1e-5)


def test_the_tree_step_trains_with_the_rollouts_weights_and_saves_a_checkpoint(tree_run):
    run, _ = tree_run
    metrics = [json.loads(line) for line in (run / "verl/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]
    # every branch (and replay) was sampled with the actor's weights of that step
    assert metrics[0]["data"]["training/rollout_probs_diff_valid"] == 1
    assert abs(metrics[0]["data"]["training/rollout_probs_diff_mean"]) < 1e-4
    record = json.loads((run / "checkpoints/step_1/checkpoint.json").read_text())
    assert record["step"] == 1 and record["config"]["estimator"] == "at_grpo"
