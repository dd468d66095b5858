"""Does the update learn? Seeded checks through the trainer's own sampling, estimator and update.

The embedded tiny model (before format pre-training) never writes a legal move, so every game
reward is the same and self-play has nothing to learn from; a whole game curriculum is too slow
for a unit test. These tests use what a step uses (batched sampling, `compute_advantages`,
`LocalTrainer.update`) on (1) a toy task whose reward the model can raise in a few updates and
(2) a real self-play rollout with advantages chosen by the test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from core.batcher import Request, Sampling, generate_batch
from core.runstore import RunDir
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig
from train_backend.local.rollout import TurnSample
from train_backend.local.trainer import LocalTrainer

PROMPT = (
    "Tic-tac-toe: get 3 in a row on the 3x3 board. Cells (row,col) from 0.\nYou are X.\n"
    "State:\n...\n...\n...\nLegal: <X(0,0)> <X(0,1)> <X(0,2)> <X(1,0)> <X(1,1)> <X(1,2)> "
    "<X(2,0)> <X(2,1)> <X(2,2)>\nReply <answer>ACTION</answer>."
)


def _trainer(tmp_path: Path, **settings: object) -> LocalTrainer:
    torch.set_num_threads(1)
    config = TrainConfig.for_local(
        games=["tic_tac_toe"],
        warmup_steps=0,
        lr_schedule="constant",
        eval_every=0,
        **settings,
    )
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    trainer = LocalTrainer(config, run, log=lambda _line: None)
    trainer.load()
    return trainer


def test_a_few_updates_raise_an_easy_reward(tmp_path: Path) -> None:
    """Reward 1 when the reply mentions "answer": about a quarter of replies at first."""
    trainer = _trainer(tmp_path, learning_rate=1e-3, minibatch_turns=64)
    prompt = trainer.policy.encode_chat([{"role": "user", "content": PROMPT}])
    generator = torch.Generator().manual_seed(0)
    batch = 24
    rates = []
    for step in range(1, 5):
        replies = generate_batch(
            trainer.policy, [Request(prompt, 12)] * batch, Sampling(1.0), generator
        )
        rewards = [float("answer" in trainer.policy.decode(r.completion_ids)) for r in replies]
        rates.append(sum(rewards) / batch)
        if step == 4:
            break
        table = {
            "episode": list(range(batch)),
            "game": ["toy"] * batch,
            "seat": [0] * batch,
            "turn": [0] * batch,
            "reward": rewards,
        }
        advantages = compute_advantages(table, "grpo")
        samples = [
            TurnSample("toy", i, 0, 0, prompt, reply.completion_ids)
            for i, reply in enumerate(replies)
        ]
        stats = trainer.update(samples, advantages, step)
        assert stats.sequences == int(np.count_nonzero(advantages))  # zero-advantage turns skipped
        assert stats.updates == (1 if stats.sequences else 0)
    assert 0.05 < rates[0] < 0.6  # the task is neither solved nor hopeless at the start
    assert rates[-1] >= rates[0] + 0.3, rates


def test_one_update_moves_log_probs_with_the_advantage_sign(tmp_path: Path) -> None:
    """On a real self-play rollout: turns given +1 become likelier, turns given -1 less likely."""
    trainer = _trainer(
        tmp_path, learning_rate=2e-4, games_per_step=4, max_new_tokens=12, minibatch_turns=4
    )
    rollout = trainer.rollout(step=1)
    samples = rollout.samples
    assert len(samples) >= 4
    advantages = np.array([1.0 if i % 2 == 0 else -1.0 for i in range(len(samples))])
    before = trainer.sequence_log_probs(trainer.policy.model, samples)
    stats = trainer.update(samples, advantages, step=1)
    assert stats.updates == -(-len(samples) // 4)  # ceil: one per minibatch of 4 turns
    after = trainer.sequence_log_probs(trainer.policy.model, samples)
    change = np.array([float(a.sum() - b.sum()) for a, b in zip(after, before, strict=True)])
    assert change[advantages > 0].mean() > 0 > change[advantages < 0].mean()
    assert (change[advantages > 0].mean() - change[advantages < 0].mean()) > 0.05
    # The update kept the trajectory's tokens: log-probs are per reply token.
    assert [len(a) for a in after] == [len(s.completion_ids) for s in samples]


def test_zero_advantages_and_no_kl_leave_the_weights_alone(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, games_per_step=2, max_new_tokens=8)
    rollout = trainer.rollout(step=1)
    weights = [p.detach().clone() for p in trainer.policy.model.parameters()]
    stats = trainer.update(rollout.samples, np.zeros(len(rollout.samples)), step=1)
    assert stats.updates == 0
    assert all(
        torch.equal(a, b) for a, b in zip(weights, trainer.policy.model.parameters(), strict=True)
    )
