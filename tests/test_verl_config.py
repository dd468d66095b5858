"""The verl adapter's pure parts, which need neither verl nor a GPU: turn rows and their
advantages, the dataset, and the TrainConfig -> Hydra override mapping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from core.errors import MarsError
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig, VerlSettings
from train_backend.verl import names
from train_backend.verl.data import game_rows, write_dataset
from train_backend.verl.overrides import (
    NO_DUAL_CLIP,
    RunPaths,
    hydra_value,
    mini_batch_prompts,
    verl_overrides,
    verl_settings,
)
from train_backend.verl.turns import (
    TurnRows,
    bound_turn_rows,
    current_turn_rows,
    token_advantages,
    turn_reward_scores,
)

# Two tic-tac-toe games and one Kuhn game; rows deliberately out of order.
TURNS = [
    # game, episode, seat, turn, reward, response tokens
    ("tic_tac_toe", "a", 0, 1, 1.05, 4),
    ("tic_tac_toe", "a", 1, 0, 0.05, 2),
    ("tic_tac_toe", "a", 0, 0, 0.05, 3),
    ("tic_tac_toe", "a", 1, 1, -0.95, 5),
    ("tic_tac_toe", "b", 0, 0, 0.05, 1),
    ("tic_tac_toe", "b", 1, 0, -11.0, 6),
    ("kuhn_poker", "c", 0, 0, 0.05, 2),
    ("kuhn_poker", "c", 1, 0, 2.05, 3),
    ("kuhn_poker", "c", 0, 1, -1.95, 2),
]


def extra_fields(turns=TURNS) -> list[dict]:
    return [
        {
            names.GAME: g,
            names.EPISODE: e,
            names.SEAT: s,
            names.TURN: t,
            names.REWARD: r,
        }
        for g, e, s, t, r, _ in turns
    ]


def token_layout(turns=TURNS, pad_rows: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded tensors as verl builds them: the reward on each row's last response token."""
    width = max(n for *_, n in turns) + 2
    rewards = torch.zeros(len(turns) + pad_rows, width)
    mask = torch.zeros(len(turns) + pad_rows, width, dtype=torch.int64)
    for row, (*_, reward, n) in enumerate(turns):
        mask[row, :n] = 1
        rewards[row, n - 1] = reward
    return rewards, mask


def expected_advantages(estimator: str, **options) -> np.ndarray:
    table = {
        "game": [t[0] for t in TURNS],
        "episode": [t[1] for t in TURNS],
        "seat": [t[2] for t in TURNS],
        "turn": [t[3] for t in TURNS],
        "reward": [t[4] for t in TURNS],
        "tokens": [t[5] for t in TURNS],
    }
    return compute_advantages(table, estimator, **options)


@pytest.mark.parametrize(
    ("estimator", "options"),
    [
        ("marshal", {}),
        ("no_turn_level", {}),
        ("no_agent_norm", {"scale": "mean"}),
        ("marshal_reference", {}),
        ("marshal", {"gamma": 0.5}),
    ],
)
def test_token_advantages_are_compute_advantages_spread_over_tokens(estimator, options):
    rewards, mask = token_layout(pad_rows=2)
    rows = TurnRows.from_extra_fields(
        [*extra_fields(), *extra_fields()[:2]],  # verl's padding rows copy a real row's fields
        [False] * len(TURNS) + [True, True],
    )
    advantages = token_advantages(estimator, rewards, mask, rows, **options)
    expected = expected_advantages(estimator, **options)
    assert advantages.dtype == rewards.dtype and advantages.shape == rewards.shape
    for row, value in enumerate(expected):
        n = TURNS[row][5]
        assert torch.allclose(advantages[row, :n], torch.full((n,), value, dtype=torch.float32))
        assert torch.all(advantages[row, n:] == 0)
    assert torch.all(advantages[len(TURNS) :] == 0)


def test_turn_reward_is_the_row_sum_of_token_rewards():
    # An in-reward KL penalty spreads over the tokens; the turn's reward is the row's sum.
    rewards, mask = token_layout()
    spread = rewards.clone()
    spread[0, 0] -= 0.3
    spread[0, 3] += 0.3
    rows = TurnRows.from_extra_fields(extra_fields(), [False] * len(TURNS))
    same = token_advantages("marshal", spread, mask, rows)
    assert torch.allclose(same, token_advantages("marshal", rewards, mask, rows), atol=1e-6)


def test_rows_without_mars_fields_are_refused():
    fields = extra_fields()
    del fields[3][names.TURN]
    with pytest.raises(MarsError, match="row 3 lacks mars_turn"):
        TurnRows.from_extra_fields(fields, [False] * len(TURNS))


def test_batch_and_turn_records_must_line_up():
    rows = TurnRows.from_extra_fields(extra_fields(), [False] * len(TURNS))
    rewards, mask = token_layout(pad_rows=1)
    with pytest.raises(MarsError, match="10 rows but 9 rows of turn records"):
        token_advantages("marshal", rewards, mask, rows)


def test_bound_rows_are_visible_only_inside_the_block():
    rows = TurnRows.from_extra_fields(extra_fields(), [False] * len(TURNS))
    with bound_turn_rows(rows):
        assert current_turn_rows("marshal") is rows
    with pytest.raises(MarsError, match="trainer_mode=mars"):
        current_turn_rows("marshal")


def test_turn_reward_scores_put_each_turns_reward_on_its_last_token():
    rows = TurnRows.from_extra_fields(extra_fields()[:3], [False, False, True])
    scores = turn_reward_scores(rows, [4, 2, 1])
    assert [len(s) for s in scores] == [4, 2, 1]
    assert torch.cat(scores).tolist() == pytest.approx([0, 0, 0, 1.05, 0, 0.05, 0])


# ---- data ------------------------------------------------------------------------------------


def test_dataset_rows_take_turns_over_games_with_consecutive_seeds(tmp_path: Path):
    config = TrainConfig(
        model="m",
        games=["tic_tac_toe", "kuhn_poker", "mini_hanabi"],
        steps=4,
        games_per_step=6,
        seed=100,
    )
    path = write_dataset(config, tmp_path / "games.parquet")
    frame = pd.read_parquet(path)
    assert len(frame) == 4 * 6
    first_step = frame.iloc[:6]
    assert first_step["game"].value_counts().to_dict() == {
        "tic_tac_toe": 2,
        "kuhn_poker": 2,
        "mini_hanabi": 2,
    }
    assert frame[frame.game == "kuhn_poker"]["seed"].tolist() == list(range(100, 108))
    assert set(frame["agent_name"]) == {names.AGENT_LOOP_NAME}
    prompt = list(frame.iloc[1]["prompt"])
    assert [m["role"] for m in prompt] == ["system", "user"]
    assert "Kuhn" in prompt[0]["content"] and "# Game rules" in prompt[1]["content"]
    assert frame.iloc[5]["extra_info"]["index"] == 5


def test_group_size_must_divide_the_games_of_a_step():
    config = TrainConfig(model="m", games_per_step=10, group_size=4)
    with pytest.raises(MarsError, match="multiple of group_size"):
        game_rows(config)


def test_a_game_listed_twice_is_refused():
    with pytest.raises(MarsError, match="listed twice"):
        game_rows(TrainConfig(model="m", games=["kuhn_poker", "kuhn-poker"]))


# ---- overrides -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        (3, "3"),
        (1e-06, "1e-06"),
        ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B"),
        ("10.0.0.1:6379", "10.0.0.1:6379"),
        ("/runs/a b/x", "'/runs/a b/x'"),
        ("it's", "'it\\'s'"),
        ("null", "'null'"),
        (["console", "file"], "[console,file]"),
    ],
)
def test_hydra_values(value, text):
    assert hydra_value(value) == text


def test_overrides_carry_the_training_config(tmp_path: Path):
    config = TrainConfig(
        model="/models/qwen",
        games=["kuhn_poker"],
        estimator="no_agent_norm",
        estimator_options={"gamma": 0.9, "scale": "mean"},
        steps=50,
        games_per_step=64,
        group_size=4,
        learning_rate=2e-6,
        kl_coef=0.0,
        dual_clip=None,
        top_k=0,
        max_new_tokens=1024,
        max_game_tokens=8192,
        minibatch_turns=32,
        verl=VerlSettings(n_gpus_per_node=4, nnodes=2, ray_address="10.0.0.1:6379"),
    )
    settings = verl_settings(config, RunPaths(tmp_path / "run"))
    assert settings["algorithm.adv_estimator"] == "no_agent_norm"
    assert settings["algorithm.gamma"] == 0.9
    assert settings["algorithm.norm_adv_by_std_in_grpo"] is False
    assert settings["data.train_batch_size"] == 16  # 64 games, 4 per seed
    assert settings["actor_rollout_ref.rollout.n"] == 4
    assert settings["actor_rollout_ref.actor.ppo_mini_batch_size"] == 8  # 32 turns / 4
    assert settings["actor_rollout_ref.actor.use_kl_loss"] is False
    assert settings["actor_rollout_ref.actor.clip_ratio_c"] == NO_DUAL_CLIP
    assert settings["actor_rollout_ref.rollout.top_k"] == -1
    assert settings["actor_rollout_ref.rollout.max_model_len"] == 8192 + 1024
    assert settings["trainer.total_training_steps"] == 50
    assert settings["trainer.nnodes"] == 2 and settings["trainer.n_gpus_per_node"] == 4
    assert settings["trainer.v1.trainer_mode"] == names.TRAINER_NAME
    assert settings["+ray_kwargs.ray_init.address"] == "10.0.0.1:6379"
    env = settings["+ray_kwargs.ray_init.runtime_env.env_vars"]
    assert env["VERL_USE_EXTERNAL_MODULES"] == names.PLUGIN_MODULE
    assert env["VERL_FILE_LOGGER_PATH"] == str((tmp_path / "run/verl/metrics.jsonl").resolve())
    assert settings["data.train_files"] == str((tmp_path / "run/verl/data/games.parquet").resolve())


def test_grpo_maps_to_the_prefixed_verl_name_and_user_extras_come_last(tmp_path: Path):
    config = TrainConfig(
        model="m",
        estimator="grpo",
        verl=VerlSettings(extra_overrides=["trainer.logger=[console]"]),
    )
    overrides = verl_overrides(config, RunPaths(tmp_path))
    assert "algorithm.adv_estimator=mars_grpo" in overrides
    assert overrides[-1] == "trainer.logger=[console]"
    assert "+ray_kwargs.ray_init.address" not in " ".join(overrides)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": None}, "needs --model"),
        ({"estimator": "ppo"}, "unknown estimator 'ppo'"),
        ({"estimator_options": {"eps": 1e-3}}, "eps cannot be passed through verl"),
        ({"estimator_options": {"scale": "max"}}, "verl takes mean_std or mean"),
        ({"invalid": "retry:x"}, "--invalid"),
    ],
)
def test_settings_verl_cannot_take_are_refused(tmp_path: Path, changes, message):
    config = TrainConfig(**{"model": "m", **changes})
    with pytest.raises(MarsError, match=message):
        verl_settings(config, RunPaths(tmp_path))


# ---- mini-batches in rows --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("games", "gpus", "nodes", "group", "turns", "unit", "expected"),
    [
        (12, 8, 1, 1, 64, "conversation", 24),  # 12 games, 2 seats: 24 rows, 3 per rank
        (12, 8, 1, 1, 64, "turn", 8),  # at least 12 turns: 8 rows, 1 per rank
        (192, 8, 1, 1, 64, "conversation", 64),  # the paper's generalist
        (6, 8, 1, 1, 64, "turn", 8),  # fewer games than ranks: one row per rank
        (48, 4, 2, 4, 32, "conversation", 32),  # 8 prompts x rollout.n 4 = 32 rows
        (24, 6, 1, 4, 64, "turn", 24),  # 4 rows a prompt on 6 ranks: whole 3 prompts
        (10, 1, 1, 1, 64, "conversation", 20),
    ],
)
def test_mini_batches_are_sized_in_rows_that_split_over_the_ranks(
    games, gpus, nodes, group, turns, unit, expected
):
    config = TrainConfig(
        model="m",
        games_per_step=games,
        group_size=group,
        minibatch_turns=turns,
        sample_unit=unit,
        verl=VerlSettings(n_gpus_per_node=gpus, nnodes=nodes),
    )
    prompts = mini_batch_prompts(config)
    assert prompts * group % (gpus * nodes) == 0  # verl's assertion at the first update
    assert prompts == expected // group


def test_each_sizing_passes_the_first_update_check(tmp_path: Path):
    from train_backend.verl.compose import compose_verl_config

    for gpus in (1, 3, 8):
        for games in (2, 7, 12, 30):
            config = TrainConfig(
                model="m", games_per_step=games, verl=VerlSettings(n_gpus_per_node=gpus)
            )
            # composing needs verl's config files only, and the check needs no verl import
            compose_verl_config(verl_overrides(config, RunPaths(tmp_path)), validate=False)


def test_the_cpu_device_settings_come_only_with_the_cpu_device(tmp_path: Path):
    paths = RunPaths(tmp_path)
    cuda = verl_settings(TrainConfig(model="m"), paths)
    assert cuda["trainer.n_gpus_per_node"] == 8 and "trainer.device" not in cuda
    assert "VERL_PLATFORM" not in cuda["+ray_kwargs.ray_init.runtime_env.env_vars"]
    cpu = verl_settings(TrainConfig(model="m", verl={"device": "cpu"}), paths)
    assert cpu["trainer.n_gpus_per_node"] == 1  # one logical device unless asked for more
    assert cpu["trainer.device"] == "cpu" and cpu["+ray_kwargs.ray_init.num_gpus"] == 1
    env = cpu["+ray_kwargs.ray_init.runtime_env.env_vars"]
    assert env["VERL_PLATFORM"] == "cpu"
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"{names.CPU_DEVICE_MODULE},{names.PLUGIN_MODULE}"
    two = TrainConfig(model="m", verl={"device": "cpu", "n_gpus_per_node": 2})
    assert verl_settings(two, paths)["+ray_kwargs.ray_init.num_gpus"] == 2
    attached = TrainConfig(model="m", verl={"device": "cpu", "ray_address": "h:1"})
    assert "+ray_kwargs.ray_init.num_gpus" not in verl_settings(attached, paths)  # its own GPUs


def test_conversation_samples_span_the_whole_game(tmp_path: Path):
    config = TrainConfig(model="m", max_game_tokens=8000, max_new_tokens=500)
    settings = verl_settings(config, RunPaths(tmp_path))
    assert settings["data.max_prompt_length"] == 8000
    assert settings["data.max_response_length"] == 8500
    assert settings["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 8500
    turn = verl_settings(config.model_copy(update={"sample_unit": "turn"}), RunPaths(tmp_path))
    assert turn["data.max_response_length"] == 500


# ---- at_grpo, state groups and opponents in the config -----------------------------------------


def test_an_at_grpo_run_plays_tree_rows_as_turn_samples(tmp_path: Path):
    config = TrainConfig(
        model="m",
        games=["kuhn_poker"],
        estimator="at_grpo",
        estimator_options={"state_weight": 0.5},
        tree={"branches": 5, "continuation": "random", "all_actions": True},
        games_per_step=4,
        max_new_tokens=64,
        opponent="random",
        verl=VerlSettings(n_gpus_per_node=1),
    )
    rows = game_rows(config)
    assert {row["sample_unit"] for row in rows} == {"turn"}  # conversation in the config
    assert rows[0]["branches"] == 5 and rows[0]["continuation"] == "random"
    assert rows[0]["all_actions"] is True and rows[0]["opponent"] == "random"
    settings = verl_settings(config, RunPaths(tmp_path))
    assert settings["algorithm.adv_estimator"] == "at_grpo"
    assert settings["data.max_response_length"] == 64  # one reply, not a conversation
    # each game yields at least K samples: a mini-batch of all 4 x 5 rows
    assert settings["actor_rollout_ref.actor.ppo_mini_batch_size"] == 20
    env = settings["+ray_kwargs.ray_init.runtime_env.env_vars"]
    assert env["MARS_ESTIMATOR_SWITCHES"] == '{"state_weight": 0.5}'


def test_every_tree_setting_reaches_the_agent_loop_through_its_column():
    from train_backend.config import TreeSettings
    from train_backend.verl.tree_loop import tree_options

    tree = TreeSettings(
        branches=3,
        continuation="greedy",
        all_actions=True,
        counterfactual=True,
        team_weight=0.5,
        explore=0.25,
        branch_rate=0.5,
        keep_invalid=True,
    )
    defaults = TreeSettings().model_dump()
    assert all(getattr(tree, name) != value for name, value in defaults.items())  # none default
    config = TrainConfig(
        model="m", games=["kuhn_poker"], estimator="at_grpo", tree=tree, games_per_step=2
    )
    row = game_rows(config)[0]
    assert tree_options(row) == tree
    # as verl's dataset hands the row over: through a parquet-backed frame, numpy scalars
    assert tree_options(pd.DataFrame(game_rows(config)).iloc[0].to_dict()) == tree


def test_self_play_rows_carry_no_tree_or_opponent_columns():
    row = game_rows(TrainConfig(model="m", games_per_step=2, steps=1))[0]
    assert not {"branches", "opponent"} & set(row)


def test_against_an_opponent_a_conversation_game_yields_one_sample():
    config = TrainConfig(
        model="m", games_per_step=6, opponent="random", verl=VerlSettings(n_gpus_per_node=1)
    )
    assert mini_batch_prompts(config) == 6  # one seat's chat a game (self-play: 12)


@pytest.mark.parametrize("weight", [-1, "high", True])
def test_a_bad_state_weight_is_refused_before_verl(weight, tmp_path: Path):
    config = TrainConfig(model="m", estimator_options={"state_weight": weight})
    with pytest.raises(MarsError, match="state_weight"):
        verl_settings(config, RunPaths(tmp_path))


def test_long_game_memory_and_disk_defaults_come_with_the_gpus(tmp_path: Path):
    memory = {
        "actor_rollout_ref.actor.entropy_from_logits_with_chunking": True,
        "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        "trainer.max_actor_ckpt_to_keep": 2,
    }
    cuda = verl_settings(TrainConfig(model="m"), RunPaths(tmp_path))
    assert {key: cuda.get(key) for key in memory} == memory
    # The CPU device keeps every checkpoint (a rehearsal saves each step) and has no vLLM-sized
    # logits to chunk.
    cpu = verl_settings(TrainConfig(model="m", verl={"device": "cpu"}), RunPaths(tmp_path))
    assert not set(memory) & set(cpu)
    # the user's extras come after them, so they win
    keep_all = VerlSettings(extra_overrides=["trainer.max_actor_ckpt_to_keep=null"])
    overrides = verl_overrides(TrainConfig(model="m", verl=keep_all), RunPaths(tmp_path))
    assert overrides.index("trainer.max_actor_ckpt_to_keep=2") < overrides.index(
        "trainer.max_actor_ckpt_to_keep=null"
    )


def test_deterministic_asks_verl_for_full_determinism_on_the_actor_reference_and_rollout(
    tmp_path: Path,
):
    keys = [
        f"actor_rollout_ref.{part}.full_determinism"
        for part in ("actor.fsdp_config", "ref.fsdp_config", "rollout")
    ]
    plain = verl_settings(TrainConfig(model="m"), RunPaths(tmp_path))
    assert not set(keys) & set(plain)  # verl's defaults (false) stand
    on = TrainConfig(model="m", verl={"device": "cpu", "deterministic": True})
    settings = verl_settings(on, RunPaths(tmp_path))
    assert all(settings[key] is True for key in keys)
    from train_backend.verl.compose import compose_verl_config

    compose_verl_config(verl_overrides(on, RunPaths(tmp_path)), validate=False)  # real keys
