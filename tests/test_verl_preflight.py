"""The verl preflight: each refusal shown on this CPU machine with the facts it reads faked where
they live (package metadata and a flash_attn package on sys.path, a model's config.json in a
folder or a hub cache, verl's checkpoint folder, CUDA and free disk through `Machine`)."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, mars_env, run_mars
from model_testkit import QWEN3_4B

from core.errors import MarsError
from core.runstore import RunDir
from train_backend.config import TrainConfig, VerlSettings
from train_backend.verl import launch
from train_backend.verl.checkpoints import LATEST_FILE
from train_backend.verl.model_files import decoder_parameters
from train_backend.verl.overrides import RunPaths
from train_backend.verl.preflight_rows import Machine
from train_backend.verl.stack import FLASH_ATTN, PINS, SUPPORTED

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

GOOD = {"torch": "2.11.0", "transformers": "5.9.0", "vllm": "0.24.0"}
# Qwen3-4B's published config.json (the keys read here)
ROOMY = 10**15  # free bytes: more than any save here
CUDA = Machine(cuda=lambda: True, disk_free=lambda _: ROOMY)
NO_CUDA = Machine(cuda=lambda: False, disk_free=lambda _: ROOMY)


@pytest.fixture(autouse=True)
def _no_cached_flash_attn() -> Iterator[None]:
    sys.modules.pop("flash_attn", None)
    yield
    sys.modules.pop("flash_attn", None)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Installs fake distributions (and a flash_attn package) ahead of the real ones."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))

    def install(versions: dict[str, str], flash_attn: str | None = None) -> None:
        for name, version in versions.items():
            info = root / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            )
        if flash_attn is not None:
            package = root / "flash_attn"
            package.mkdir()
            (package / "__init__.py").write_text(flash_attn)
        importlib.invalidate_caches()

    return install


def model_folder(tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "qwen3-4b"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**QWEN3_4B, **changes}))
    return folder


def cluster_config(model: str | Path = "Qwen/Qwen3-4B", **changes) -> TrainConfig:
    values = {
        "model": str(model),
        "games": ["tic_tac_toe", "kuhn_poker"],
        "steps": 4,
        "games_per_step": 16,
        "max_game_tokens": 32768,
        "max_new_tokens": 4096,
        "verl": VerlSettings(n_gpus_per_node=8),
    }
    values.update(changes)
    return TrainConfig(**values)


def extras(*overrides: str) -> VerlSettings:
    return VerlSettings(n_gpus_per_node=8, extra_overrides=list(overrides))


# ---- the stack ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({**GOOD, "transformers": "5.12.0"}, r"transformers 5\.12\.0, verl 0\.9\.1 runs "),
        ({**GOOD, "vllm": "0.25.1"}, r"vllm 0\.25\.1, .*installs vllm==0\.24\.0"),
        ({**GOOD, "torch": "2.5.1"}, r"torch 2\.5\.1, verl 0\.9\.1 runs torch>=2\.6"),
    ],
)
def test_a_cuda_node_refuses_versions_verl_does_not_run(site, versions, expected):
    site({**versions, "flash-attn": "2.8.3"}, flash_attn="__version__ = '2.8.3'\n")
    with pytest.raises(MarsError, match=expected) as refused:
        launch.preflight(cluster_config(), dry_run=True, machine=CUDA)
    assert "\n" not in str(refused.value) and "make setup-verl-gpu" in str(refused.value)


def test_a_missing_rollout_engine_is_refused_on_a_cuda_node(site):
    site({"torch": "2.11.0", "transformers": "5.9.0", "flash-attn": "2.8.3"}, "")
    # the real environment has no vllm either; the fake site adds none
    with pytest.raises(MarsError, match=r"vllm is not installed"):
        launch.preflight(cluster_config(), dry_run=True, machine=CUDA)


def test_the_pinned_stack_passes_and_the_dry_run_prints_the_versions_found(site, tmp_path, capsys):
    site({**GOOD, "flash-attn": "2.8.3"}, flash_attn="__version__ = '2.8.3'\n")
    config = cluster_config(model_folder(tmp_path))
    launch.preflight(config, dry_run=True, machine=CUDA)
    launch.run_verl(config, RunDir(tmp_path / "run", "train"), dry_run=True, machine=CUDA)
    table = capsys.readouterr().out.split("preflight (verl 0.9.1):\n", 1)[1]
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[:8]}
    assert rows["torch"][:2] == ["ok", "2.11.0"]
    assert rows["transformers"][:2] == ["ok", "5.9.0"]
    assert rows["vllm"][:2] == ["ok", "0.24.0"]
    assert rows["flash-attn"][:2] == ["ok", "2.8.3"]
    assert rows["attention"][0] == rows["context"][0] == rows["resume"][0] == "ok"
    assert rows["disk"][0] == "ok"


def test_without_cuda_a_dry_run_shows_what_a_gpu_node_would_refuse(site, tmp_path, capsys):
    site({**GOOD, "vllm": "0.25.1"})
    launch.run_verl(
        cluster_config(), RunDir(tmp_path / "run", "train"), dry_run=True, machine=NO_CUDA
    )
    out = capsys.readouterr().out
    assert re.search(r"vllm +warning +0\.25\.1 .* a GPU node refuses it", out)
    assert re.search(r"flash-attn +not checked", out)


def test_a_launch_from_a_cpu_head_node_still_refuses_the_versions(site):
    # The GPUs are the Ray cluster's, but the driver runs here: its stack must be the pinned one.
    site({**GOOD, "transformers": "5.24.0"})
    attach = VerlSettings(n_gpus_per_node=8, ray_address="10.0.0.1:6379")
    with pytest.raises(MarsError, match=r"transformers 5\.24\.0"):
        launch.preflight(cluster_config(verl=attach), dry_run=False, machine=NO_CUDA)


@pytest.mark.parametrize(
    "flash_attn",
    [
        "raise ImportError('flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi')\n",
        None,  # not installed at all
    ],
)
def test_flash_attention_must_import_on_a_cuda_node(site, flash_attn):
    site({**GOOD, **({"flash-attn": "2.8.3"} if flash_attn else {})}, flash_attn)
    with pytest.raises(MarsError, match=r"flash_attn does not import on this CUDA node") as refused:
        launch.preflight(cluster_config(), dry_run=True, machine=CUDA)
    message = str(refused.value)
    assert "attn_implementation=flash_attention_2" in message
    assert "use_remove_padding=false" in message  # the documented alternative
    if flash_attn:
        assert "undefined symbol" in message


def test_an_explicit_attention_without_padding_removal_needs_no_flash_attn(site, capsys):
    site(GOOD)  # no flash_attn anywhere
    choice = extras(
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=false",
    )
    report = launch.preflight(cluster_config(verl=choice), dry_run=True, machine=CUDA)
    assert "sdpa, padding removal off" in report.table()
    assert "flash-attn" not in report.table()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["+actor_rollout_ref.model.override_config.attn_implementation=sdpa"],
            r"attn_implementation=sdpa with use_remove_padding=true",
        ),
        (
            [
                "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                "actor_rollout_ref.model.use_remove_padding=false",
                "+actor_rollout_ref.model.override_config.attn_implementation=eager",
            ],
            r"ulysses_sequence_parallel_size 2 needs use_remove_padding=true",
        ),
    ],
)
def test_attention_choices_verl_cannot_run_are_refused_anywhere(site, overrides, expected):
    site(GOOD)
    with pytest.raises(MarsError, match=expected):
        launch.preflight(cluster_config(verl=extras(*overrides)), dry_run=True, machine=NO_CUDA)


# ---- the model's context --------------------------------------------------------------------


def test_max_model_len_beyond_the_models_positions_is_refused(tmp_path):
    folder = model_folder(tmp_path, max_position_embeddings=32768)
    with pytest.raises(MarsError, match=r"max_model_len 36864 .* the 32768 positions") as refused:
        launch.preflight(cluster_config(folder), dry_run=True, machine=NO_CUDA)
    assert str(folder / "config.json") in str(refused.value)
    # within the positions: accepted
    launch.preflight(cluster_config(folder, max_game_tokens=28672), dry_run=True, machine=NO_CUDA)


def test_the_hub_cache_is_read_without_the_network(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    repo = cache / "models--Qwen--Qwen3-4B"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps({**QWEN3_4B, "max_position_embeddings": 8192}))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    with pytest.raises(MarsError, match=r"the 8192 positions of Qwen/Qwen3-4B"):
        launch.preflight(cluster_config(), dry_run=True, machine=NO_CUDA)


def test_yarn_scaling_extends_the_positions(tmp_path):
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    folder = model_folder(tmp_path, max_position_embeddings=32768, rope_scaling=yarn)
    config = cluster_config(folder, max_game_tokens=126976)  # 131,072 in all
    report = launch.preflight(config, dry_run=True, machine=NO_CUDA)
    assert "max_model_len 131072 of 131072 positions" in report.table()


def test_an_unreadable_config_is_said_so_not_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    report = launch.preflight(cluster_config(), dry_run=True, machine=NO_CUDA)
    row = next(line for line in report.table().splitlines() if "context" in line)
    assert "not checked" in row and "no config.json for Qwen/Qwen3-4B" in row
    assert str(tmp_path / "empty-cache") in row


# ---- resume and disk: the run directory ------------------------------------------------------


def saved_checkpoint(run: Path, step: int, ranks: int, *, config_file: bool) -> Path:
    """verl's actor checkpoint folder as its FSDP checkpoint manager names it (empty shards)."""
    checkpoints = RunPaths(run).verl_checkpoints
    actor = checkpoints / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for rank in range(ranks):
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_{ranks}_rank_{rank}.pt").write_bytes(b"")
    if config_file:
        (actor / "fsdp_config.json").write_text(
            json.dumps({"FSDP_version": 2, "world_size": ranks})
        )
    (checkpoints / LATEST_FILE).write_text(str(step))
    return actor


@pytest.mark.parametrize("config_file", [True, False])
def test_resuming_on_another_world_size_is_refused(tmp_path, config_file):
    run = tmp_path / "run"
    actor = saved_checkpoint(run, 40, ranks=8, config_file=config_file)
    sixteen = cluster_config(verl=VerlSettings(n_gpus_per_node=8, nnodes=2))
    with pytest.raises(MarsError, match=r"saved by 8 ranks .* this run has 16") as refused:
        launch.run_verl(sixteen, RunDir(run, "train"), dry_run=True, machine=NO_CUDA)
    assert str(actor) in str(refused.value) and "\n" not in str(refused.value)
    assert not RunPaths(run).dataset.exists()  # refused before anything was written
    launch.run_verl(cluster_config(), RunDir(run, "train"), dry_run=True, machine=NO_CUDA)


def test_too_little_disk_for_two_saves_is_refused(tmp_path):
    folder = model_folder(tmp_path)
    asked: list[Path] = []

    def free(path: Path) -> int:
        asked.append(path)
        return 100 * 10**9

    run = tmp_path / "runs" / "new"
    with pytest.raises(MarsError, match=r"100\.0 GB free, less than 2 saves") as refused:
        launch.run_verl(
            cluster_config(folder), RunDir(run, "train"), dry_run=True,
            machine=Machine(cuda=lambda: False, disk_free=free),
        )  # fmt: skip
    # Qwen3-4B: 4.02B parameters x (12 bytes of fp32 weights and AdamW moments + 2 of bf16)
    assert "(112.6 GB:" in str(refused.value)
    assert asked and run.resolve().is_relative_to(asked[0])  # the checkpoints' file system
    roomy = Machine(cuda=lambda: False, disk_free=lambda _: 113 * 10**9)
    launch.run_verl(cluster_config(folder), RunDir(run, "train"), dry_run=True, machine=roomy)


def test_the_parameter_count_comes_from_the_weights_when_present(tmp_path, capsys):
    import torch
    from safetensors.torch import save_file

    folder = model_folder(tmp_path)
    save_file({"a": torch.zeros(1000, 3), "b": torch.zeros(7)}, folder / "model.safetensors")
    launch.run_verl(
        cluster_config(folder), RunDir(tmp_path / "r", "train"), dry_run=True, machine=NO_CUDA
    )
    assert "0.00B parameters, model.safetensors header" in capsys.readouterr().out


def test_qwen3_4b_is_counted_from_its_config():
    assert decoder_parameters(QWEN3_4B) == pytest.approx(4.02e9, rel=0.005)


# ---- one place for the versions --------------------------------------------------------------


def test_the_pins_are_inside_what_the_preflight_accepts():
    from packaging.specifiers import SpecifierSet

    for name in ("torch", "transformers", "vllm"):
        assert PINS[name] in SpecifierSet(SUPPORTED[name].specifier), name
    assert FLASH_ATTN[1] in SpecifierSet(SUPPORTED["flash-attn"].specifier)
    makefile = (REPO / "Makefile").read_text()
    target = makefile.split("setup-verl-gpu:\n", 1)[1].split("\n\n", 1)[0]
    assert (
        "train_backend.verl.stack pins" in target
        and "train_backend.verl.stack flash-attn" in target
    )
    pins = subprocess.run(
        [sys.executable, "-m", "train_backend.verl.stack", "pins"],
        capture_output=True, text=True, cwd=REPO, check=True,
    ).stdout.split()  # fmt: skip
    assert pins == [f"{name}=={version}" for name, version in PINS.items()]


def test_a_refusal_through_the_cli_is_one_line_and_makes_no_run_directory(tmp_path):
    folder = model_folder(tmp_path, max_position_embeddings=16384)
    out = tmp_path / "runs"
    result = run_mars(
        "train", "--trainer", "verl", "--model", str(folder), "--dry-run", "--out", str(out),
        env=mars_env(HF_HUB_CACHE=str(tmp_path / "hub")),
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: preflight: rollout.max_model_len 36864")
    assert not out.exists()


def test_the_readmes_cluster_dry_run_prints_the_preflight_table(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mars.main import app, register_commands

    register_commands()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    run_dir = tmp_path / "marshal-4b"
    args = ["train", "--trainer", "verl", "--model", "Qwen/Qwen3-4B", "--dry-run"]
    args += ["--games", "tic_tac_toe,kuhn_poker,mini_hanabi", "--run-dir", str(run_dir)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    lines = result.output.splitlines()
    start = lines.index("preflight (verl 0.9.1):")
    checks = [line.split()[0] for line in lines[start + 1 : start + 9]]
    assert checks == [
        "torch", "transformers", "vllm", "flash-attn", "attention", "context", "resume", "disk",
    ]  # fmt: skip
    versions = dict(line.split()[:3:2] for line in lines[start + 1 : start + 3])
    assert versions["torch"] == importlib.metadata.version("torch")  # the versions found here
    assert "verl.trainer.main_ppo" in lines[-2]  # then the command, as before
