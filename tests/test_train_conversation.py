"""The CPU trainer's default sample with `full` prompts: one seat's whole conversation.

A real self-play step with the tiny model (invalid replies are re-asked, so seats have several
turns): each seat's chat is one token sequence whose replies are the model's own tokens, every
model call saw exactly a prefix of it, and scoring the packed conversation gives each reply the
log-probs it gets on its own. The update moves each turn's log-probs with its own advantage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from core.runstore import RunDir
from train_backend.config import TrainConfig
from train_backend.local.ppo import pack, token_log_probs
from train_backend.local.trainer import LocalTrainer


def _trainer(tmp_path: Path, **settings: object) -> LocalTrainer:
    torch.set_num_threads(1)
    defaults = {
        "games": ["tic_tac_toe", "kuhn_poker"],
        "prompt_style": "full",
        "invalid": "retry:2",
        "games_per_step": 4,
        "max_new_tokens": 16,
        "warmup_steps": 0,
        "lr_schedule": "constant",
        "eval_every": 0,
    }
    config = TrainConfig.for_local(**{**defaults, **settings})
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    trainer = LocalTrainer(config, run, log=lambda _line: None)
    trainer.load()
    return trainer


def _reply_log_probs(trainer: LocalTrainer, prompt: list[int], completion: list[int]):
    packed = pack([prompt], [completion], trainer.policy.pad_id)
    with torch.no_grad():
        values = token_log_probs(trainer.policy.model, packed, trainer.config.temperature)
    return values[0, packed.keep - len(completion) :]


def test_a_seats_conversation_is_one_sequence_of_what_it_saw_and_said(tmp_path: Path):
    trainer = _trainer(tmp_path)
    rollout = trainer.rollout(step=1)
    rows, samples = rollout.rows, rollout.samples
    seats = {(row["game"], row["episode"], row["seat"]) for row in rows}
    assert len(samples) == len(seats) < len(rows)  # one sample per seat, most with several turns
    assert sorted(i for sample in samples for i in sample.rows) == list(range(len(rows)))
    for sample in samples:
        assert [rows[i]["turn"] for i in sample.rows] == list(range(len(sample.rows)))
        mask = sample.loss_mask
        assert len(mask) == len(sample.completion_ids)
        assert [i for i, m in enumerate(mask) if m] == [
            i for start, end in sample.spans for i in range(start, end)
        ]
        prompt = len(sample.prompt_ids)
        for row, (start, end) in zip(sample.rows, sample.spans, strict=True):
            # the call saw the conversation up to its reply, and the reply is its own tokens
            assert rows[row]["prompt_tokens"] == prompt + start
            assert rows[row]["tokens"] == end - start
        # scoring the whole conversation gives each reply the log-probs it had in its own call
        whole = _reply_log_probs(trainer, sample.prompt_ids, sample.completion_ids)
        sequence = sample.prompt_ids + sample.completion_ids
        for start, end in sample.spans:
            alone = _reply_log_probs(
                trainer, sequence[: prompt + start], sequence[prompt + start : prompt + end]
            )
            assert torch.allclose(whole[start:end], alone, atol=1e-4)
    several = [s for s in samples if len(s.rows) > 1]
    assert len(several) >= 2
    for sample in several:  # the context after a reply is in the sample, without loss
        assert 0 in sample.loss_mask[sample.spans[0][1] : sample.spans[1][0]]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_turn_of_a_conversation_moves_with_its_own_advantage(tmp_path: Path, sign: float):
    trainer = _trainer(tmp_path, learning_rate=1e-5, minibatch_turns=64)
    rollout = trainer.rollout(step=1)
    samples = [s for s in rollout.samples if len(s.rows) > 1]
    assert samples
    # only each seat's first reply has an advantage; its later replies are context for nothing
    advantages = np.array([sign if row["turn"] == 0 else 0.0 for row in rollout.rows])

    def first_replies() -> np.ndarray:
        out = []
        for sample in samples:
            values = _reply_log_probs(trainer, sample.prompt_ids, sample.completion_ids)
            start, end = sample.spans[0]
            out.append(float(values[start:end].sum()))
        return np.array(out)

    before = first_replies()
    stats = trainer.update(samples, advantages, step=1)
    assert stats.sequences == len(samples) and stats.updates == 1
    change = first_replies() - before
    assert sign * change.mean() > 0.05


def test_compact_prompts_stand_alone_so_each_turn_is_its_own_sample(tmp_path: Path):
    trainer = _trainer(tmp_path, prompt_style="compact")
    rollout = trainer.rollout(step=1)
    assert len(rollout.samples) == len(rollout.rows)
    assert all(sample.loss_mask is None for sample in rollout.samples)


def test_the_evaluation_plays_with_the_context_training_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from train_backend.local import trainer as trainer_module

    made = []

    def spy(*args: object, **kwargs: object) -> object:
        made.append(real(*args, **kwargs))
        return made[-1]

    real = trainer_module.make_responder
    monkeypatch.setattr(trainer_module, "make_responder", spy)
    trainer = _trainer(tmp_path, games=["tic_tac_toe"], eval_every=1, eval_episodes=2)
    trainer._evaluate(step=0)
    (responder,) = made
    # Two opponents play the same seeds: each (opponent, seed, seat) is a context of its own.
    assert len(responder.chats) == 2 * 2 * 2
    chats = [chat for chat in responder.chats.values() if len(chat.spans) > 1]
    assert chats  # seats that replied more than once (retries included), in one growing context
    for chat in chats:
        first_start, first_end = chat.spans[0]
        later_prompt = chat.spans[1][0]
        # the second call's context holds the first reply's own tokens, not a re-rendered text
        assert first_end <= later_prompt
        assert all(chat.mask[i] == 1 for i in range(first_start, first_end))
