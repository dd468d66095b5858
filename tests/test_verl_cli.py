"""`mars train --trainer verl` through the CLI: dry runs against verl's real config for the two
reference setups, and the bad inputs that must end as one error line and a non-zero exit."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, mars_env, run_mars
from typer.testing import CliRunner

from mars.main import app, register_commands
from train_backend.verl.overrides import RunPaths

register_commands()

GENERALIST_GAMES = "tic_tac_toe,kuhn_poker,mini_hanabi"
SINGLE_GPU_YAML = """\
games_per_step: 8
steps: 4
max_new_tokens: 512
max_game_tokens: 4096
minibatch_turns: 8
save_every: 2
verl:
  n_gpus_per_node: 1
  gpu_memory_utilization: 0.5
"""


def dry_run(run_dir: Path, *args: str) -> tuple[dict[str, str], list[str]]:
    """Run `mars train --trainer verl --dry-run` in process; the printed command's overrides."""
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    result = CliRunner().invoke(
        app, ["train", "--trainer", "verl", "--dry-run", "--run-dir", str(run_dir), *args]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert lines[-1] == f"run dir: {run_dir}"
    words = shlex.split(lines[-2])
    start = words.index("verl.trainer.main_ppo") + 1
    overrides = words[start:]
    assert (run_dir / "verl" / "command.sh").read_text().strip().endswith(shlex.join(overrides))
    settings = dict(o.split("=", 1) for o in overrides)
    assert len(settings) == len(overrides)  # no key set twice
    return settings, overrides


def test_dry_run_of_the_papers_generalist_on_one_node_of_8_gpus(tmp_path):
    from train_backend.verl.compose import compose_verl_config

    run_dir = tmp_path / "generalist"
    settings, overrides = dry_run(run_dir, "--model", "Qwen/Qwen3-4B", "--games", GENERALIST_GAMES)
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    expected = {
        "trainer.n_gpus_per_node": "8",
        "trainer.nnodes": "1",
        "actor_rollout_ref.model.path": "Qwen/Qwen3-4B",
        f"{rollout}.name": "vllm",
        f"{rollout}.tensor_model_parallel_size": "1",
        # 192 self-play games a step (384 player trajectories), one game per seed
        "data.train_batch_size": "192",
        f"{rollout}.n": "1",
        f"{actor}.ppo_mini_batch_size": "64",
        # the verl backend's default: the `marshal` preset, the released code's choices
        "algorithm.adv_estimator": "marshal_reference",
        "algorithm.gamma": "1.0",
        "algorithm.norm_adv_by_std_in_grpo": "true",
        f"{actor}.optim.lr": "1e-06",
        f"{actor}.optim.lr_scheduler_type": "cosine",
        f"{actor}.optim.lr_warmup_steps": "10",
        f"{actor}.optim.weight_decay": "0.05",
        f"{actor}.optim.betas": "[0.9,0.95]",
        f"{actor}.optim.min_lr_ratio": "0.0",
        f"{actor}.use_kl_loss": "true",
        f"{actor}.kl_loss_coef": "0.2",
        f"{actor}.kl_loss_type": "low_var_kl",
        f"{actor}.clip_ratio": "0.2",
        f"{actor}.clip_ratio_c": "1.4",
        f"{actor}.entropy_coeff": "0.0",
        f"{actor}.loss_agg_mode": "seq-mean-token-mean",
        f"{rollout}.temperature": "0.6",
        f"{rollout}.top_p": "0.99",
        f"{rollout}.top_k": "100",
        # one sample per seat's conversation: everything after its first prompt, up to the
        # game's chat budget and the last reply
        "data.max_response_length": "36864",
        "data.max_prompt_length": "32768",
        f"{actor}.ppo_max_token_len_per_gpu": "36864",
        "trainer.total_training_steps": "200",
        "trainer.save_freq": "20",
        "trainer.use_v1": "true",
        "trainer.v1.trainer_mode": "mars",
        f"{rollout}.agent.default_agent_loop": "mars_selfplay",
    }
    assert {key: settings.get(key) for key in expected} == expected
    assert not any("ray_init.address" in key for key in settings)  # verl starts its own Ray

    config = compose_verl_config(overrides)  # what verl will read
    assert config.trainer.n_gpus_per_node == 8 and config.trainer.nnodes == 1
    assert config.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert config.actor_rollout_ref.actor.kl_loss_coef == pytest.approx(0.2)
    assert config.algorithm.adv_estimator == "marshal_reference"
    assert list(config.actor_rollout_ref.actor.optim.betas) == [0.9, 0.95]
    # long games: chunked entropy, the reference's parameters on the CPU, two saves kept
    actor_engine = config.actor_rollout_ref.actor.fsdp_config
    assert actor_engine.entropy_from_logits_with_chunking is True  # the engine reads this
    assert actor_engine.entropy_from_logits_chunk_size == 2048
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is True
    assert config.trainer.max_actor_ckpt_to_keep == 2

    frame = pd.read_parquet(RunPaths(run_dir).dataset)
    assert len(frame) == 200 * 192
    assert frame.iloc[:192]["game"].value_counts().to_dict() == {
        "tic_tac_toe": 64,
        "kuhn_poker": 64,
        "mini_hanabi": 64,
    }
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "dry_run" and info["config"]["verl"]["n_gpus_per_node"] == 8
    assert info["config"]["preset"] == "marshal" and info["config"]["parse_mode"] == "strict"
    assert frame.iloc[0]["parse_mode"] == "strict" and frame.iloc[0]["turn_rewards"] == "step"
    assert not (run_dir / "logs").exists()  # nothing was launched


def test_dry_run_of_a_small_single_gpu_run(tmp_path):
    from train_backend.verl.compose import compose_verl_config

    config_file = tmp_path / "single.yaml"
    config_file.write_text(SINGLE_GPU_YAML)
    run_dir = tmp_path / "single"
    settings, overrides = dry_run(
        run_dir,
        "--config", str(config_file),
        "--model", "Qwen/Qwen3-0.6B",
        "--games", "tic_tac_toe",
        "--estimator", "no_turn_level",
        "--lr", "2e-6",
        "--kl-coef", "0",
        "--temperature", "1.0",
    )  # fmt: skip
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    expected = {
        "trainer.n_gpus_per_node": "1",
        "trainer.nnodes": "1",
        "actor_rollout_ref.model.path": "Qwen/Qwen3-0.6B",
        f"{rollout}.tensor_model_parallel_size": "1",
        f"{rollout}.gpu_memory_utilization": "0.5",
        "data.train_batch_size": "8",
        f"{actor}.ppo_mini_batch_size": "8",
        f"{rollout}.n": "1",
        "algorithm.adv_estimator": "no_turn_level",
        f"{actor}.optim.lr": "2e-06",
        f"{actor}.use_kl_loss": "false",
        f"{actor}.kl_loss_coef": "0.0",
        f"{rollout}.temperature": "1.0",
        "data.max_response_length": "4608",
        "data.max_prompt_length": "4096",
        f"{rollout}.max_model_len": "4608",
        "trainer.total_training_steps": "4",
        "trainer.save_freq": "2",
    }
    assert {key: settings.get(key) for key in expected} == expected
    config = compose_verl_config(overrides)
    assert config.trainer.n_gpus_per_node == 1
    assert config.actor_rollout_ref.actor.use_kl_loss is False
    assert len(pd.read_parquet(RunPaths(run_dir).dataset)) == 4 * 8


def test_dry_run_attaching_to_a_ray_cluster_of_two_nodes(tmp_path):
    config_file = tmp_path / "two-nodes.yaml"
    config_file.write_text("verl:\n  nnodes: 2\n  ray_address: 10.0.0.1:6379\n")
    settings, _ = dry_run(
        tmp_path / "two", "--config", str(config_file), "--model", "Qwen/Qwen3-4B"
    )
    assert settings["trainer.nnodes"] == "2" and settings["trainer.n_gpus_per_node"] == "8"
    assert settings["+ray_kwargs.ray_init.address"] == "10.0.0.1:6379"

    flag, _ = dry_run(
        tmp_path / "flag", "--model", "Qwen/Qwen3-4B", "--ray-address", "10.0.0.2:6379"
    )
    assert flag["+ray_kwargs.ray_init.address"] == "10.0.0.2:6379"
    local = CliRunner().invoke(app, ["train", "--ray-address", "h:1", "--out", str(tmp_path)])
    assert "--ray-address is for --trainer verl" in str(local.exception)


# ---- bad input: one line on stderr, a non-zero exit, nothing launched -------------------------


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_real_launch_without_a_gpu_suggests_the_local_backend(tmp_path):
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")  # checked first
    env = {k: v for k, v in mars_env().items() if k != "RAY_ADDRESS"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU for the launch, even on a machine that has one
    result = run_mars(
        "train", "--trainer", "verl", "--model", "Qwen/Qwen3-4B", "--out", str(tmp_path),
        env=env,
    )  # fmt: skip
    line = one_error_line(result)
    assert "no GPU" in line and "--trainer local" in line and "--device cpu" in line
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


def test_an_unknown_estimator_is_refused(tmp_path):
    result = run_mars(
        "train", "--trainer", "verl", "--model", "Qwen/Qwen3-4B", "--estimator", "ppo_magic",
        "--dry-run", "--out", str(tmp_path),
    )  # fmt: skip
    line = one_error_line(result)
    assert "unknown estimator 'ppo_magic'" in line and "marshal" in line
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


def test_without_verl_the_error_names_the_install(tmp_path):
    # `import verl` fails in this process as it does where verl was never installed.
    script = (
        "import sys; sys.modules['verl'] = None; sys.argv[0] = 'mars'; "
        "from mars.main import run; run()"
    )
    args = ["train", "--trainer", "verl", "--model", "m", "--dry-run", "--out", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=mars_env(),
        cwd=REPO,
        check=False,
    )
    line = one_error_line(result)
    assert "verl is not installed" in line and "make setup-verl" in line
    assert "`verl` extra" in line  # which extra to install
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


# ---- mini-batches: sized in rows, and what verl would refuse at its first update -------------


def test_twelve_games_a_step_on_eight_gpus_get_mini_batches_that_divide(tmp_path):
    # verl splits a step's rows (seat conversations) into mini-batches and asserts at the first
    # update that each divides over the 8 data-parallel ranks; 12 rows would not.
    settings, _ = dry_run(tmp_path / "twelve", "--model", "Qwen/Qwen3-4B", "--games-per-step", "12")
    assert settings["data.train_batch_size"] == "12"
    assert settings["actor_rollout_ref.actor.ppo_mini_batch_size"] == "24"  # 2 seats x 12
    assert int(settings["actor_rollout_ref.actor.ppo_mini_batch_size"]) % 8 == 0


def test_a_dry_run_refuses_mini_batches_verl_would_stop_at_in_one_line(tmp_path):
    config_file = tmp_path / "forced.yaml"
    config_file.write_text(
        "games_per_step: 12\nverl:\n  extra_overrides:\n"
        "    - actor_rollout_ref.actor.ppo_mini_batch_size=12\n"
    )
    result = run_mars(
        "train", "--trainer", "verl", "--model", "Qwen/Qwen3-4B", "--config", str(config_file),
        "--dry-run", "--run-dir", str(tmp_path / "run"),
    )  # fmt: skip
    line = one_error_line(result)
    assert "verl would stop at its first update" in line
    assert "12 rows" in line and "8 data-parallel ranks" in line
    assert "multiple of 8" in line  # the fix
    assert not (tmp_path / "run" / "logs").exists()  # nothing was launched


def test_a_dry_run_refuses_a_token_budget_shorter_than_a_sample(tmp_path):
    from train_backend.verl.compose import compose_verl_config

    _, overrides = dry_run(tmp_path / "ok", "--model", "Qwen/Qwen3-4B")
    from core.errors import MarsError

    with pytest.raises(MarsError, match=r"ppo_max_token_len_per_gpu \(4096\) is shorter"):
        compose_verl_config([*overrides, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"])


# ---- --device cpu ---------------------------------------------------------------------------


def test_dry_run_on_the_cpu_device(tmp_path):
    settings, _ = dry_run(
        tmp_path / "cpu", "--device", "cpu", "--model", "m", "--games", "kuhn_poker"
    )
    # CPU-sized defaults (as --trainer local), one logical device, verl's own trainer
    assert settings["trainer.device"] == "cpu" and settings["trainer.n_gpus_per_node"] == "1"
    assert settings["data.train_batch_size"] == "32"
    assert settings["actor_rollout_ref.rollout.name"] == "mars_cpu"
    assert settings["actor_rollout_ref.actor.strategy"] == "fsdp2"
    assert settings["+actor_rollout_ref.model.override_config.attn_implementation"] == "eager"
    assert settings["+ray_kwargs.ray_init.num_gpus"] == "1"
    env = settings["+ray_kwargs.ray_init.runtime_env.env_vars"]
    assert "VERL_PLATFORM:cpu" in env
    assert "train_backend.verl.cpu_device,train_backend.verl.plugin" in env
    info = json.loads((tmp_path / "cpu" / "run.json").read_text())
    assert info["config"]["verl"]["device"] == "cpu"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer", "verl", "--device", "tpu"], "--device must be cuda or cpu"),
        (["--trainer", "local", "--device", "cpu"], "--device is for --trainer verl"),
    ],
)
def test_a_bad_device_is_one_error_line(tmp_path, args, message):
    result = run_mars("train", *args, "--model", "m", "--dry-run", "--out", str(tmp_path))
    assert message in one_error_line(result)
    assert not any(tmp_path.iterdir())
