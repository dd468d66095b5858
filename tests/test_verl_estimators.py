"""The MARSHAL estimators inside verl give exactly `compute_advantages` on agent-loop outputs.

The batch is built the way a verl v1 run builds it: games played by the self-play agent loop
against a scripted server, stored by verl's own worker code (which copies the final score onto
earlier turns), padded and reordered by verl's own helpers, then scored by the mars trainer's
`_compute_advantage`, i.e. verl's `_compute_advantage` calling the registered estimator.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

import torch
from tensordict import TensorDict
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl_testkit import (
    FakeTransferQueue,
    ScriptedServer,
    install_fake_transfer_queue,
    make_loop,
    scoring_trainer,
    store_like_verl,
    tiny_tokenizer,
)

import train_backend.verl.plugin  # noqa: F401  (registers estimators, loop, trainer)
from core.errors import MarsError
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig
from train_backend.verl import names
from train_backend.verl.trainer import MarshalPPOTrainer
from train_backend.verl.turns import TurnRows, bound_turn_rows

GAMES = ("tic_tac_toe", "kuhn_poker", "mini_hanabi")


def random_play(episode: int, illegal_rate: float):
    """Legal moves chosen at random (fixed per episode); now and then an illegal reply."""

    def script(legal: list[str], seat: int, call: int) -> str:
        rng = random.Random(f"{episode}/{seat}/{call}")
        if rng.random() < illegal_rate:
            return "<answer><NOT A MOVE></answer>"
        return f"<think>{'x' * rng.randint(0, 9)}</think><answer>{rng.choice(legal)}</answer>"

    return script


async def play_batch(fake_tq: FakeTransferQueue, unit: str = "turn") -> list[dict]:
    """Twelve games (two rollout sessions of each of six seeds) stored the way verl stores them;
    returns the expected turn table: one row per turn, with the stored sample (`key`) that holds
    it and its reply's token span in that sample's response."""
    table = []
    for index in range(6):
        game = GAMES[index % len(GAMES)]
        seed = 100 + index
        uid = f"prompt{index}"
        for session in range(2):
            episode = 2 * index + session
            server = ScriptedServer(random_play(episode, illegal_rate=0.08))
            row = {"game": game, "seed": seed, "prompt_style": "full", "invalid": "penalty"}
            outputs = await make_loop(server).run(
                {"temperature": 1.0}, uid=uid, session_id=session, sample_unit=unit, **row
            )
            await store_like_verl(
                fake_tq, outputs, uid=uid, session_id=session, global_steps=1, **row
            )
            for i, output in enumerate(outputs):
                fields = output.extra_fields
                turns, rewards = fields[names.TURN], fields[names.REWARD]
                spans = fields.get(names.SPANS, [(0, len(output.response_ids))])
                if not isinstance(turns, list):
                    turns, rewards = [turns], [rewards]
                for turn, reward, (start, end) in zip(turns, rewards, spans, strict=True):
                    table.append(
                        {
                            "key": f"{uid}_{session}_{i}",
                            "span": (start, end),
                            "episode": f"{uid}/{session}",
                            "game": game,
                            "seat": fields[names.SEAT],
                            "turn": turn,
                            "reward": reward,
                            "tokens": end - start,
                            "group": uid,
                        }
                    )
    return table


def turn_columns(table: list[dict]) -> dict[str, list]:
    return {c: [row[c] for row in table] for c in table[0] if c not in ("key", "span")}


def trainer_for(estimator: str, tmp_path) -> MarshalPPOTrainer:
    config = TrainConfig(model="some/model", estimator=estimator, games=list(GAMES))
    return scoring_trainer(config, tmp_path)


@pytest.fixture
def fake_tq(monkeypatch: pytest.MonkeyPatch) -> FakeTransferQueue:
    return install_fake_transfer_queue(monkeypatch)


@pytest.mark.parametrize("unit", ["conversation", "turn"])
@pytest.mark.parametrize(
    "estimator", ["marshal", "no_turn_level", "no_agent_norm", "marshal_reference", "grpo"]
)
async def test_trainer_advantages_match_compute_advantages(
    estimator, unit, fake_tq, tmp_path, monkeypatch
):
    table = await play_batch(fake_tq, unit)
    batch = fake_tq.batch()
    assert sorted(batch.keys) == sorted({row["key"] for row in table})
    if unit == "conversation":  # one sample per seat and game, most holding several turns
        assert len(batch.keys) < len(table)
    # verl's own steps before the advantage: pad to a multiple, then reorder the rows.
    batch = upsample_batch_to_divisible_size(batch, 16, tiny_tokenizer().eos_token_id)
    assert any(tag.get("is_padding") for tag in batch.tags)
    order = list(range(len(batch)))
    random.Random(3).shuffle(order)
    batch.reorder(order)
    # verl's step 4 (old log-probs); the actor's recomputation is stood in for by the rollout's.
    rollout = fake_tq.kv_batch_get(batch.keys, "train", ["rollout_log_probs"])
    old = TensorDict({"old_log_probs": rollout.get("rollout_log_probs")}, batch_size=len(batch))
    fake_tq.kv_batch_put(batch.keys, "train", fields=old)
    monkeypatch.setenv(names.TURNS_DIR_ENV, str(tmp_path / "turns"))

    trainer = trainer_for(estimator, tmp_path)
    trainer.global_steps = 5
    trainer._compute_advantage(batch, metrics={})

    stored = fake_tq.kv_batch_get(batch.keys, "train", ["advantages", "rm_scores", "response_mask"])
    expected = compute_advantages(turn_columns(table), estimator)
    assert len(set(np.round(expected, 6))) > 3  # the batch really has spread
    turns_of: dict[str, list[tuple[dict, float]]] = {}
    for row, value in zip(table, expected, strict=True):
        turns_of.setdefault(row["key"], []).append((row, value))
    for key, tag, advantages, scores, mask in zip(
        batch.keys,
        batch.tags,
        stored["advantages"].unbind(),
        stored["rm_scores"].unbind(),
        stored["response_mask"].unbind(),
        strict=True,
    ):
        if tag.get("is_padding"):
            assert torch.all(advantages == 0)
            continue
        expected_advantages = torch.zeros_like(advantages)
        expected_scores = torch.zeros_like(scores)
        for row, value in turns_of[key]:
            start, end = row["span"]
            expected_advantages[start:end] = value  # every token of a reply: its turn's
            expected_scores[end - 1] = row["reward"]  # the turn's own reward, on its last token
        # float32 in verl's batch; observations between a seat's replies carry nothing
        assert torch.allclose(advantages, expected_advantages * mask, atol=1e-6)
        assert torch.allclose(scores, expected_scores, atol=1e-6)
    # the step's turns as the trainer recorded them: what verl stored, per turn
    dumped = [json.loads(line) for line in (tmp_path / "turns/step_5.jsonl").open()]
    assert len(dumped) == len(table)
    assert compute_advantages(
        {
            c: [d[c] for d in dumped]
            for c in ("game", "episode", "group", "seat", "turn", "reward", "tokens")
        },
        estimator,
    ) == pytest.approx([d["advantage"] for d in dumped], abs=1e-5)
    assert sorted(d["advantage"] for d in dumped) == pytest.approx(sorted(expected), abs=1e-5)
    assert {d["weights_step"] for d in dumped} == {7}  # the scripted server's policy version


async def test_registered_estimator_on_verl_tensor_layout(fake_tq):
    """Called through verl's registry with right-padded token tensors, as compute_advantage does."""
    table = await play_batch(fake_tq, "turn")
    width = max(row["tokens"] for row in table) + 3
    rewards = torch.zeros(len(table), width)
    mask = torch.zeros(len(table), width, dtype=torch.int64)
    for i, row in enumerate(table):
        mask[i, : row["tokens"]] = 1
        rewards[i, row["tokens"] - 1] = row["reward"]
    extra = [
        {
            names.GAME: row["game"],
            names.EPISODE: row["episode"],
            names.SEAT: row["seat"],
            names.TURN: row["turn"],
            names.REWARD: row["reward"],
        }
        for row in table
    ]
    rows = TurnRows.from_extra_fields(extra, [False] * len(table))
    estimator = core_algos.get_adv_estimator_fn("marshal_reference")
    uids = np.array([row["group"] for row in table], dtype=object)
    config = core_algos.AlgoConfig(gamma=1.0, norm_adv_by_std_in_grpo=False)
    with bound_turn_rows(rows):
        advantages, returns = estimator(
            token_level_rewards=rewards, response_mask=mask, index=uids, config=config
        )
    expected = compute_advantages(turn_columns(table), "marshal_reference", scale="mean")
    assert torch.equal(advantages, returns)
    per_row = advantages.sum(-1) / mask.sum(-1)
    assert np.allclose(per_row.numpy(), expected, atol=1e-6)
    assert torch.all(advantages[mask == 0] == 0)


def test_estimator_without_turn_rows_says_how_to_run_it():
    estimator = core_algos.get_adv_estimator_fn("marshal")
    with pytest.raises(MarsError, match="trainer_mode=mars"):
        estimator(token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3))


def test_registry_names_and_trainer():
    from verl.trainer.ppo.v1 import get_trainer_cls

    for verl_name in names.VERL_ESTIMATOR_NAMES.values():
        assert core_algos.get_adv_estimator_fn(verl_name).__module__ == (
            "train_backend.verl.estimators"
        )
    assert get_trainer_cls(names.TRAINER_NAME) is MarshalPPOTrainer


# What runs in a fresh verl process: only `import verl`, then look at verl's registries.
REGISTRIES_AFTER_IMPORTING_VERL = """
import json, sys
import verl
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1 import get_trainer_cls
print(json.dumps({
    "plugin_loaded": "train_backend.verl.plugin" in sys.modules,
    "estimators": sorted(n for n, f in ADV_ESTIMATOR_REGISTRY.items()
                         if f.__module__ == "train_backend.verl.estimators"),
    "agent_loop": "mars_selfplay" in _agent_loop_registry,
    "trainer": get_trainer_cls("mars").__name__,
}))
"""


@pytest.mark.parametrize(
    "route",
    [
        # what the launcher sets for the driver and, through Ray's runtime env, every worker
        {"VERL_USE_EXTERNAL_MODULES": names.PLUGIN_MODULE, "VERL_USE_EXTERNAL_PLUGINS": "none"},
        # the `verl.plugins` entry point of pyproject.toml, which verl loads on import
        {"VERL_USE_EXTERNAL_PLUGINS": "mars"},
    ],
    ids=["external-modules", "entry-point"],
)
def test_importing_verl_registers_everything_in_a_fresh_process(route):
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    result = subprocess.run(
        [sys.executable, "-c", REGISTRIES_AFTER_IMPORTING_VERL],
        capture_output=True,
        text=True,
        env={**env, **route},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {
        "plugin_loaded": True,
        "estimators": sorted(names.VERL_ESTIMATOR_NAMES.values()),
        "agent_loop": True,
        "trainer": "MarshalPPOTrainer",
    }
