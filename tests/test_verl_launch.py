"""Launching verl: the dry run against verl's real config, the training process, checkpoints."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from core.errors import MarsError
from core.runstore import RunDir
from train_backend.config import TrainConfig, VerlSettings
from train_backend.verl import launch, names
from train_backend.verl.checkpoints import (
    CHECKPOINT_FILE,
    LATEST_FILE,
    MERGE_ATTEMPTS,
    CheckpointPublisher,
    merge_command,
    run_logged,
)
from train_backend.verl.overrides import RunPaths


def small_config(**changes) -> TrainConfig:
    values = {
        "model": "Qwen/Qwen3-4B",
        "games": ["tic_tac_toe", "kuhn_poker", "mini_hanabi"],
        "steps": 3,
        "games_per_step": 24,
        "verl": VerlSettings(n_gpus_per_node=8),
    }
    values.update(changes)
    return TrainConfig(**values)


def test_missing_verl_is_one_clear_line(monkeypatch, tmp_path):
    real_find_spec = launch.importlib.util.find_spec
    monkeypatch.setattr(
        launch.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "verl" else real_find_spec(name, *a),
    )
    with pytest.raises(MarsError, match="make setup-verl"):
        launch.run_verl(small_config(), RunDir(tmp_path, "train"), dry_run=True)


@pytest.mark.parametrize(
    ("cluster", "gpus", "message"),
    [
        (VerlSettings(), 0, r"no GPU on this machine.*--trainer local"),
        (VerlSettings(n_gpus_per_node=8), 4, r"n_gpus_per_node is 8 but this machine has 4"),
        (VerlSettings(nnodes=2), 8, r"nnodes is 2, but without verl.ray_address"),
    ],
)
def test_a_real_launch_needs_the_gpus_it_asks_for(monkeypatch, cluster, gpus, message):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(MarsError, match=message):
        launch.require_gpus(small_config(verl=cluster), gpu_count=lambda: gpus)


def test_gpus_are_not_counted_here_when_attaching_to_a_ray_cluster(monkeypatch):
    def no_local_count() -> int:
        raise AssertionError("the head node's GPUs are not the cluster's")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    attach = VerlSettings(nnodes=4, ray_address="10.0.0.1:6379")
    launch.require_gpus(small_config(verl=attach), gpu_count=no_local_count)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # Ray's own variable, read by ray.init
    launch.require_gpus(small_config(verl=VerlSettings(nnodes=4)), gpu_count=no_local_count)
    launch.require_gpus(small_config(), gpu_count=lambda: 8)  # enough GPUs here: fine


def test_dry_run_composes_verls_config_and_prints_the_command(tmp_path, capsys):
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    from train_backend.verl.compose import compose_verl_config

    run = RunDir(tmp_path / "run", "train")
    run.path.mkdir()
    launch.run_verl(small_config(), run, dry_run=True)

    printed = capsys.readouterr().out.strip().splitlines()[-1]
    words = shlex.split(printed)
    python = words.index(sys.executable)
    env = dict(word.split("=", 1) for word in words[:python])
    assert env["VERL_USE_EXTERNAL_MODULES"] == "train_backend.verl.plugin"
    assert env[names.TURNS_DIR_ENV] == str((tmp_path / "run/verl/turns").resolve())
    assert "VERL_PLATFORM" not in env  # the CPU device is loaded only when asked for
    assert words[python : python + 3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    overrides = words[python + 3 :]
    assert "algorithm.adv_estimator=marshal" in overrides
    assert "trainer.v1.trainer_mode=mars" in overrides
    # the printed command, read back by a shell, is what verl accepts
    config = compose_verl_config(overrides)
    assert config.data.train_batch_size == 24
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "mars_selfplay"
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == (
        "train_backend.verl.plugin"
    )
    paths = RunPaths(run.path)
    assert paths.command_file.read_text().strip().endswith(printed.split(" ", 2)[-1])
    assert len(pd.read_parquet(paths.dataset)) == 3 * 24
    assert not paths.logs.exists()  # nothing was launched


def test_dry_run_refuses_an_unknown_verl_key(tmp_path):
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    config = small_config(verl=VerlSettings(extra_overrides=["trainer.no_such_knob=1"]))
    with pytest.raises(MarsError, match=r"verl rejects the overrides: .*trainer\.no_such_knob"):
        launch.run_verl(config, RunDir(tmp_path, "train"), dry_run=True)


def test_dry_run_reports_verls_own_validation(tmp_path):
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    config = small_config(
        games_per_step=3,
        verl=VerlSettings(
            extra_overrides=[
                "actor_rollout_ref.actor.use_dynamic_bsz=false",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            ]
        ),
    )
    with pytest.raises(MarsError, match=r"must be divisible by minimal possible batch size"):
        launch.run_verl(config, RunDir(tmp_path, "train"), dry_run=True)


def test_a_resumed_run_keeps_the_earlier_metrics(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert launch.keep_earlier_metrics(metrics) is None
    metrics.write_text('{"step": 1}\n')
    assert launch.keep_earlier_metrics(metrics) == tmp_path / "metrics.attempt1.jsonl"
    metrics.write_text('{"step": 2}\n')
    assert launch.keep_earlier_metrics(metrics) == tmp_path / "metrics.attempt2.jsonl"
    assert (tmp_path / "metrics.attempt1.jsonl").read_text() == '{"step": 1}\n'
    assert not metrics.exists()


# ---- checkpoints -----------------------------------------------------------------------------


class FakeMerger:
    """Stands in for verl's merger: records each command and writes a model folder."""

    def __init__(self, exit_code: int = 0, writes_model: bool = True) -> None:
        self.commands: list[list[str]] = []
        self.exit_code = exit_code
        self.writes_model = writes_model

    def __call__(self, command: list[str], log_path: Path, env: dict[str, str]) -> int:
        assert env["VERL_USE_EXTERNAL_PLUGINS"] == "none"  # the merger needs no plugin
        self.commands.append(command)
        target = Path(command[command.index("--target_dir") + 1])
        assert not (target / CHECKPOINT_FILE).exists()
        if self.writes_model:
            target.mkdir(parents=True, exist_ok=True)
            (target / "config.json").write_text("{}")
            (target / "model.safetensors").write_bytes(b"weights")
        return self.exit_code


def save_verl_step(verl_checkpoints: Path, step: int, *, latest: bool = True) -> Path:
    actor = verl_checkpoints / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    if latest:
        (verl_checkpoints / LATEST_FILE).write_text(str(step))
    return actor


def publisher_for(root: Path, runner, dtype: str | None = None) -> CheckpointPublisher:
    paths = RunPaths(root)
    return CheckpointPublisher(
        run_dir=root,
        verl_checkpoints=paths.verl_checkpoints,
        checkpoints=paths.checkpoints,
        logs=paths.logs,
        details={"base_model": "Qwen/Qwen3-4B", "config": {"estimator": "marshal"}},
        metrics_file=paths.verl_metrics,
        runner=runner,
        dtype=dtype,
    )


def merged_step(command: list[str]) -> int:
    return int(re.search(r"\.step_(\d+)\.tmp-", command[-1]).group(1))


def test_each_finished_step_is_merged_then_marked_done_last(tmp_path):
    paths = RunPaths(tmp_path)
    first = save_verl_step(paths.verl_checkpoints, 2)
    save_verl_step(paths.verl_checkpoints, 4, latest=False)  # being written: not yet in latest
    stale = paths.checkpoints / "step_2" / "leftover.bin"  # a folder without checkpoint.json
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x")
    paths.verl_dir.mkdir(parents=True, exist_ok=True)
    paths.verl_metrics.write_text(
        json.dumps({"step": 1, "data": {"actor/lr": 1.0}}) + "\n"
        + json.dumps({"step": 2, "data": {"actor/lr": 2.0}}) + "\n"
    )  # fmt: skip
    merger = FakeMerger()
    publisher = publisher_for(tmp_path, merger)

    assert publisher.publish_new() == [2]
    staging = paths.checkpoints / f".step_2.tmp-{os.getpid()}"
    assert merger.commands == [
        [
            sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(first), "--target_dir", str(staging),
        ]
    ]  # fmt: skip
    step_dir = paths.checkpoints / "step_2"
    record = json.loads((step_dir / CHECKPOINT_FILE).read_text())
    assert record["step"] == 2 and record["source"] == "verl"
    assert record["run_dir"] == str(tmp_path) and record["model_dir"] == str(step_dir)
    assert record["base_model"] == "Qwen/Qwen3-4B"
    assert record["config"] == {"estimator": "marshal"}
    assert record["metrics"] == {"actor/lr": 2.0}
    assert not stale.exists() and not staging.exists()
    assert sorted(p.name for p in step_dir.iterdir()) == [
        CHECKPOINT_FILE, "config.json", "model.safetensors"
    ]  # fmt: skip
    written_last = (step_dir / CHECKPOINT_FILE).stat().st_mtime_ns
    assert all(
        p.stat().st_mtime_ns <= written_last
        for p in step_dir.iterdir()
        if p.name != CHECKPOINT_FILE
    )

    (paths.verl_checkpoints / LATEST_FILE).write_text("4")
    assert publisher.publish_new() == [4]
    assert publisher.publish_new() == []  # nothing twice
    assert len(merger.commands) == 2


@pytest.mark.parametrize(
    ("merger", "why"),
    [(FakeMerger(exit_code=1), "exited with code 1"), (FakeMerger(writes_model=False), "no model")],
)
def test_a_failed_merge_publishes_nothing_and_is_retried_a_bounded_number_of_times(
    tmp_path, merger, why
):
    save_verl_step(RunPaths(tmp_path).verl_checkpoints, 5)
    publisher = publisher_for(tmp_path, merger)
    for _ in range(MERGE_ATTEMPTS + 2):  # one attempt a poll, then no more
        assert publisher.publish_new() == []
    assert len(merger.commands) == MERGE_ATTEMPTS
    assert why in publisher.failures[5]
    report = publisher.failure_report()
    assert report.startswith("step 5: the merger") and why in report
    assert f"({MERGE_ATTEMPTS} attempt(s))" in report
    assert list(RunPaths(tmp_path).checkpoints.iterdir()) == []  # no step_5, no staging left


class FlakyMerger(FakeMerger):
    """Fails the first merge of each step in `flaky`, then merges."""

    def __init__(self, flaky: set[int], always: set[int] = frozenset()) -> None:
        super().__init__()
        self.flaky, self.always = set(flaky), set(always)

    def __call__(self, command: list[str], log_path: Path, env: dict[str, str]) -> int:
        step = merged_step(command)
        if step in self.always or step in self.flaky:
            self.flaky.discard(step)
            self.commands.append(command)
            return 1
        return super().__call__(command, log_path, env)


def test_a_merge_that_fails_once_is_published_on_the_next_poll(tmp_path):
    paths = RunPaths(tmp_path)
    save_verl_step(paths.verl_checkpoints, 2)
    merger = FlakyMerger(flaky={2})
    publisher = publisher_for(tmp_path, merger)
    assert publisher.publish_new() == []
    assert publisher.publish_new() == [2]
    assert publisher.failures == {} and publisher.gaps() == []
    assert (paths.checkpoints / "step_2" / CHECKPOINT_FILE).is_file()


def test_a_step_given_up_below_a_published_one_is_reported_as_a_gap(tmp_path):
    paths = RunPaths(tmp_path)
    save_verl_step(paths.verl_checkpoints, 2)
    save_verl_step(paths.verl_checkpoints, 4)
    publisher = publisher_for(tmp_path, FlakyMerger(flaky=set(), always={2}))
    for _ in range(MERGE_ATTEMPTS):
        publisher.publish_new()
    assert publisher.is_published(4) and not publisher.is_published(2)
    assert publisher.gaps() == [2]
    assert "checkpoints/ has no step_2 between published steps" in publisher.failure_report()


FAKE_VERL = textwrap.dedent(
    """
    import pathlib, sys, time
    saved, published = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

    def save(step):
        (saved / f"global_step_{step}" / "actor").mkdir(parents=True)
        (saved / "latest_checkpointed_iteration.txt").write_text(str(step))

    print("training step 1", flush=True)
    save(2)
    deadline = time.time() + 30
    marker = published / "step_2" / "checkpoint.json"
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.02)
    print("step 2 published while training:", marker.exists(), flush=True)
    save(4)
    print("finished", flush=True)
    sys.exit(int(sys.argv[3]))
    """
)


def fake_verl_command(paths: RunPaths, exit_code: int) -> list[str]:
    return [
        sys.executable, "-c", FAKE_VERL,
        str(paths.verl_checkpoints), str(paths.checkpoints), str(exit_code),
    ]  # fmt: skip


def test_training_streams_its_log_and_publishes_checkpoints_as_they_land(tmp_path):
    paths = RunPaths(tmp_path)
    merger = FakeMerger()
    echo = io.StringIO()
    launch.train(
        fake_verl_command(paths, 0),
        launch.launch_environment(paths),
        paths,
        publisher_for(tmp_path, merger),
        poll_seconds=0.05,
        echo=echo,
    )
    assert "step 2 published while training: True" in echo.getvalue()
    log = (paths.logs / "verl.log").read_text()
    assert log.startswith("$ ") and "finished" in log
    assert [merged_step(c) for c in merger.commands] == [2, 4]
    assert (paths.checkpoints / "step_4" / CHECKPOINT_FILE).is_file()  # saved just before exit


def test_a_failing_verl_run_is_one_clear_error_with_its_last_lines(tmp_path):
    paths = RunPaths(tmp_path)
    with pytest.raises(MarsError, match=r"verl exited with code 3; .*finished"):
        launch.train(
            fake_verl_command(paths, 3),
            launch.launch_environment(paths),
            paths,
            publisher_for(tmp_path, FakeMerger()),
            poll_seconds=0.05,
            echo=None,
        )
    # what was saved before the failure is still published
    assert (paths.checkpoints / "step_4" / CHECKPOINT_FILE).is_file()


# verl's own FSDP checkpoint code, run on the CPU: one rank, gloo, the tiny model (whose layer-0
# `down_proj` "training" moved by +0.25) sharded by verl's own `apply_fsdp2` over a mesh named as
# verl's FSDP workers name it. What the trainer's actor saves each step.
SAVE_WITH_VERL = textwrap.dedent(
    """
    import os, sys
    import torch, torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import apply_fsdp2

    source, actor_dir = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = AutoModelForCausalLM.from_pretrained(source)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight += 0.25
    mesh = init_device_mesh("cpu", mesh_shape=(1,), mesh_dim_names=("fsdp",))
    apply_fsdp2(model, {"mesh": mesh}, {})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    contents = ["model", "optimizer", "extra"]
    manager = FSDPCheckpointManager(
        model=model,
        optimizer=optimizer,
        processing_class=AutoTokenizer.from_pretrained(source),
        checkpoint_config=OmegaConf.create({"save_contents": contents, "load_contents": contents}),
    )
    manager.save_checkpoint(actor_dir, global_step=3)
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_verls_real_merger_turns_verls_own_fsdp_checkpoint_into_a_hugging_face_model(tmp_path):
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    import torch
    from transformers import AutoModelForCausalLM

    from core.tiny_model import ensure_tiny_model

    source = ensure_tiny_model()
    paths = RunPaths(tmp_path)
    actor = paths.verl_checkpoints / "global_step_3" / "actor"
    # The merger and the saver need no verl plugin; skipping them (ours loads Ray) saves seconds.
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_PLUGINS": "none",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",
    }
    saved = subprocess.run(
        [sys.executable, "-c", SAVE_WITH_VERL, str(source), str(actor)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert saved.returncode == 0, saved.stderr[-2000:]
    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == 1
    assert (actor / "model_world_size_1_rank_0.pt").is_file()
    (paths.verl_checkpoints / LATEST_FILE).write_text("3")  # verl's trainer writes it last

    publisher = publisher_for(
        tmp_path, lambda command, log, _env: run_logged(command, log, env), dtype="float32"
    )
    assert publisher.publish_new() == [3], publisher.failures
    step_dir = paths.checkpoints / "step_3"
    merged = AutoModelForCausalLM.from_pretrained(step_dir).state_dict()
    original = AutoModelForCausalLM.from_pretrained(source).state_dict()
    trained = "model.layers.0.mlp.down_proj.weight"
    for name, tensor in original.items():
        expected = tensor + 0.25 if name == trained else tensor
        # the merger rounds to bfloat16; the published model is float32 again, like its base
        assert merged[name].dtype == torch.float32
        assert torch.equal(merged[name], expected.to(torch.bfloat16).float()), name
    assert json.loads((step_dir / "config.json").read_text())["dtype"] == "float32"
    assert (step_dir / "tokenizer_config.json").is_file()
    assert json.loads((step_dir / CHECKPOINT_FILE).read_text())["step"] == 3
    assert merge_command(actor, step_dir)[3:6] == ["merge", "--backend", "fsdp"]


def test_merged_weights_are_cast_back_to_the_base_models_dtype(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from train_backend.verl.checkpoints import model_dtype, restore_dtype

    save_file(
        {"w": torch.ones(2, 3, dtype=torch.bfloat16), "steps": torch.arange(3)},
        tmp_path / "model.safetensors",
    )
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "bfloat16", "hidden_size": 8}))
    assert model_dtype(str(tmp_path)) == "bfloat16"
    assert restore_dtype(tmp_path, "float32") == 1
    tensors = load_file(tmp_path / "model.safetensors")
    assert tensors["w"].dtype == torch.float32 and torch.equal(tensors["w"], torch.ones(2, 3))
    assert tensors["steps"].dtype == torch.int64  # integer tensors are left alone
    config = json.loads((tmp_path / "config.json").read_text())
    assert config == {"dtype": "float32", "hidden_size": 8}
    with pytest.raises(ValueError, match="unknown dtype"):
        restore_dtype(tmp_path, "float99")


def test_weights_already_in_the_models_dtype_are_not_rewritten(tmp_path):
    import torch
    from safetensors.torch import save_file

    from train_backend.verl.checkpoints import restore_dtype

    weights = tmp_path / "model-00001-of-00002.safetensors"
    save_file({"w": torch.ones(2, 3, dtype=torch.bfloat16), "steps": torch.arange(3)}, weights)
    other = tmp_path / "model-00002-of-00002.safetensors"
    save_file({"v": torch.ones(4, dtype=torch.float32)}, other)
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()}
    os.utime(weights, ns=(1, 1))  # a rewrite would set a new mtime
    os.utime(tmp_path / "config.json", ns=(1, 1))
    assert restore_dtype(tmp_path, "bfloat16") == 1  # only the fp32 tensor of the other file
    assert weights.stat().st_mtime_ns == 1 and weights.read_bytes() == before[weights.name][1]
    assert (tmp_path / "config.json").stat().st_mtime_ns == 1  # already bfloat16
    assert other.read_bytes() != before[other.name][1]
