"""`mars train --trainer local` end to end on the tiny model: run dir, checkpoints, resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, mars_env
from typer.testing import CliRunner

from core.checkpoints import CHECKPOINT_FILE
from core.errors import MarsError
from core.runstore import RunDir
from mars.main import app, register_commands
from train_backend.config import TrainConfig
from train_backend.local import trainer as trainer_module
from train_backend.local.checkpoint import list_checkpoints
from train_backend.local.trainer import train_local

register_commands()  # adds `train` (and the others: with one command typer drops its name)

SMALL = {
    "eval_episodes": 3,
    "eval_opponents": {"tic_tac_toe": ["random"], "kuhn_poker": ["random"]},
    "minibatch_turns": 4,  # several optimizer updates per step, so old log-probs are recomputed
}
METRIC_FIELDS = {
    "step",
    "loss",
    "pg_loss",
    "kl",
    "clip_frac",
    "reward_mean",
    "advantage_mean",
    "advantage_std",
    "invalid_rate",
    "tokens_per_s",
    "seconds_per_step",
    "lr",
    "return_mean/tic_tac_toe/first",
    "return_mean/kuhn_poker/second",
}
EVAL_FIELDS = ("win", "draw", "loss", "ci95_low", "ci95_high", "invalid_rate", "normalized_return")


def _invoke(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(app, ["train", *args])
    return result.exit_code, result.output, result.exception


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_train_writes_run_dir_checkpoints_and_resumes(tmp_path: Path) -> None:
    config_file = tmp_path / "train.yaml"
    config_file.write_text(json.dumps(SMALL))  # JSON is YAML
    run_dir = tmp_path / "run"
    common = ["--config", str(config_file), "--run-dir", str(run_dir)]
    code, output, error = _invoke(
        *common,
        "--games", "tic_tac_toe,kuhn_poker",
        "--steps", "2",
        "--games-per-step", "4",
        "--max-tokens", "16",
        "--eval-every", "2",
        "--save-every", "2",
        "--lr", "0.001",
        "--kl-coef", "0.1",
    )  # fmt: skip
    assert code == 0, (output, error)
    assert output.strip().splitlines()[-1] == f"run dir: {run_dir}"
    # The in-training evaluation of the last step, again at the end: one line per game,
    # opponent and seat, with its interval.
    ending = output.split("last evaluation (step 2):", 1)[1].strip().splitlines()
    assert any(line.strip().startswith("kuhn_poker vs random, first seat: win ") for line in ending)
    assert all("[" in line for line in ending[:-1])

    info = RunDir.read_info(run_dir)
    assert info.kind == "train" and info.status == "completed"
    expected = TrainConfig.for_local(
        **SMALL,
        games=["tic_tac_toe", "kuhn_poker"],
        steps=2,
        games_per_step=4,
        max_new_tokens=16,
        eval_every=2,
        save_every=2,
        learning_rate=0.001,
        kl_coef=0.1,
    )
    assert info.config == expected.model_dump(mode="json")

    records = _lines(run_dir / "records.jsonl")
    keys = [(r["step"], r["game"], r["seed"]) for r in records]
    assert len(keys) == len(set(keys)) == 8  # 2 steps x 4 games
    assert {r["kind"] for r in records} == {"selfplay"}
    assert all("turns" in r and "returns" in r for r in records)

    # Step 0: the start policy evaluated before any update (eval_every is on), then the steps.
    start, *metrics = _lines(run_dir / "metrics.jsonl")
    assert start["step"] == 0 and "loss" not in start
    assert [m["step"] for m in metrics] == [1, 2]
    for line in metrics:
        assert set(line) >= METRIC_FIELDS
    assert metrics[0]["lr"] == pytest.approx(0.0005)  # warm-up: step 1 of 2
    for game in ("tic_tac_toe", "kuhn_poker"):
        for seat in ("first", "second"):
            for field in EVAL_FIELDS:
                assert f"eval/{game}/random/{seat}/{field}" in metrics[1]
                assert f"eval/{game}/random/{seat}/{field}" in start
    assert not any(key.startswith("eval/") for key in metrics[0])
    for step in (0, 2):  # games x seats x episodes
        assert len(_lines(run_dir / "evals" / f"step_{step}.jsonl")) == 2 * 2 * 3

    found = list_checkpoints(run_dir)
    assert [step for step, _ in found] == [2]
    folder = found[0][1]
    assert folder == run_dir / "checkpoints" / "step_2"
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json"):
        assert (folder / name).is_file()
    written_last = (folder / CHECKPOINT_FILE).stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= written_last for p in folder.iterdir())
    checkpoint = json.loads((folder / CHECKPOINT_FILE).read_text())
    assert checkpoint["step"] == 2
    assert checkpoint["run_dir"] == str(run_dir.resolve())
    assert checkpoint["config"] == info.config
    assert checkpoint["metrics"] == metrics[1]

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template and model.config.model_type == "qwen3"
    # A line from a step that ran but was never saved: a resume must drop it.
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": 3, "loss": 9.9}) + "\n")

    code, output, error = _invoke("--run-dir", str(run_dir), "--steps", "3")
    assert code == 0, (output, error)
    assert "resuming from" in output and "step_2" in output
    metrics = _lines(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]  # step 0 kept, not evaluated again
    assert metrics[3]["loss"] != 9.9
    assert "eval/tic_tac_toe/random/first/win" in metrics[3]  # the last step is evaluated
    assert len(_lines(run_dir / "evals" / "step_0.jsonl")) == 2 * 2 * 3
    records = _lines(run_dir / "records.jsonl")
    keys = [(r["step"], r["game"], r["seed"]) for r in records]
    assert len(keys) == len(set(keys)) == 12
    assert [step for step, _ in list_checkpoints(run_dir)] == [2, 3]
    info = RunDir.read_info(run_dir)
    assert info.attempts == 2 and info.status == "completed"
    assert info.config["games_per_step"] == 4  # the stored config, with --steps overridden
    assert info.config["steps"] == 3


def test_ctrl_c_saves_nothing_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = TrainConfig.for_local(
        games=["tic_tac_toe"], steps=3, games_per_step=2, max_new_tokens=8, eval_every=0,
        save_every=1,
    )  # fmt: skip
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    real_save = trainer_module.checkpoint.save_checkpoint

    def save_then_interrupt(*args: object, **kwargs: object) -> Path:
        if kwargs.get("trainer_state", {}).get("step") == 2:  # type: ignore[union-attr]
            raise KeyboardInterrupt
        return real_save(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(trainer_module.checkpoint, "save_checkpoint", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_local(config, run, command=["mars", "train"], log=lambda _line: None)
    assert RunDir.read_info(run.path).status == "interrupted"
    assert [step for step, _ in list_checkpoints(run.path)] == [1]
    assert sorted(p.name for p in (run.path / "checkpoints").iterdir()) == ["step_1"]


def test_bad_estimator_and_game_are_one_line_errors(tmp_path: Path) -> None:
    _, _, error = _invoke("--estimator", "ppo", "--out", str(tmp_path))
    assert isinstance(error, MarsError)
    assert "unknown estimator 'ppo'" in str(error) and "marshal" in str(error)
    _, _, error = _invoke("--games", "tic_tac_toe,chess", "--out", str(tmp_path))
    assert isinstance(error, MarsError)
    assert "chess" in str(error) and "kuhn_poker" in str(error)
    _, _, error = _invoke("--backend", "jax", "--out", str(tmp_path))
    assert isinstance(error, MarsError)
    _, _, error = _invoke("--resume", str(tmp_path / "missing"))
    assert isinstance(error, MarsError) and "missing" in str(error)
    assert not any(tmp_path.iterdir())  # nothing was created for bad input


def test_a_misspelt_config_setting_is_refused(tmp_path: Path) -> None:
    config_file = tmp_path / "train.yaml"
    config_file.write_text("learning_rte: 0.001\n")
    _, _, error = _invoke("--config", str(config_file), "--out", str(tmp_path / "runs"))
    assert isinstance(error, MarsError)
    assert str(error) == "unknown training setting 'learning_rte'"
    config_file.write_text("verl: {n_gpu_per_node: 4}\n")
    _, _, error = _invoke("--config", str(config_file), "--out", str(tmp_path / "runs"))
    assert isinstance(error, MarsError) and "verl.n_gpu_per_node" in str(error)
    assert not (tmp_path / "runs").exists()


def test_folder_that_is_not_a_causal_lm(tmp_path: Path) -> None:
    not_a_model = tmp_path / "folder"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")
    _, _, error = _invoke("--model", str(not_a_model), "--out", str(tmp_path / "runs"))
    assert isinstance(error, MarsError) and "config.json" in str(error)

    # A real Hugging Face folder, but of an encoder model: not a causal LM.
    from transformers import BertConfig

    bert = tmp_path / "bert"
    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(bert)
    _, _, error = _invoke("--model", str(bert), "--out", str(tmp_path / "runs"))
    assert isinstance(error, MarsError) and "causal LM" in str(error)
    _, _, error = _invoke("--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "runs"))
    assert isinstance(error, MarsError) and "does not exist" in str(error)
    assert not (tmp_path / "runs").exists()


def test_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mars", "train", "--estimator", "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=mars_env(),
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "unknown estimator 'nope'" in result.stderr


def test_verl_backend_is_dispatched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[TrainConfig, Path, bool]] = []
    import types

    fake = types.ModuleType("train_backend.verl.launch")

    def run_verl(config: TrainConfig, run: RunDir, *, dry_run: bool) -> None:
        calls.append((config, run.path, dry_run))

    fake.run_verl = run_verl  # type: ignore[attr-defined]
    fake.preflight = lambda config, *, dry_run: calls.append((config, Path("preflight"), dry_run))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "train_backend.verl.launch", fake)
    code, output, error = _invoke(
        "--trainer", "verl", "--steps", "7", "--run-dir", str(tmp_path / "v"), "--dry-run"
    )
    assert code == 0, (output, error)
    assert [path for _, path, _ in calls] == [Path("preflight"), tmp_path / "v"]  # checks first
    config, path, dry_run = calls[1]
    assert dry_run and path == tmp_path / "v"
    assert config.steps == 7 and config.games_per_step == TrainConfig().games_per_step  # cluster


def test_missing_verl_backend_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "train_backend.verl.launch", None)
    _, _, error = _invoke("--trainer", "verl", "--dry-run", "--out", os.devnull)
    assert isinstance(error, MarsError) and "make setup-verl" in str(error)


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    code, output, error = _invoke("--steps", "5", "--out", str(tmp_path / "runs"), "--dry-run")
    assert code == 0, (output, error)
    assert '"steps": 5' in output and "dry run" in output
    assert not (tmp_path / "runs").exists()
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize(
    ("config", "estimator", "options"),
    [
        ("estimator: at_grpo\n", "at_grpo", {}),
        (
            "estimator: marshal\nestimator_options: {state_weight: 1}\n",
            "marshal",
            {"state_weight": 1},
        ),
    ],
)
def test_tree_sampling_and_state_groups_reach_verl(
    tmp_path: Path, config: str, estimator: str, options: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both run on verl (tests/test_verl_tree.py); the CLI passes them through unrefused.
    import types

    launched: list[TrainConfig] = []
    fake = types.ModuleType("train_backend.verl.launch")
    fake.preflight = lambda config, *, dry_run: None  # type: ignore[attr-defined]
    fake.run_verl = lambda config, run, *, dry_run: launched.append(config)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "train_backend.verl.launch", fake)
    file = tmp_path / "c.yaml"
    file.write_text(config)
    code, output, error = _invoke(
        "--trainer", "verl", "--config", str(file), "--run-dir", str(tmp_path / "v"), "--dry-run"
    )
    assert code == 0, (output, error)
    assert [(c.estimator, c.estimator_options) for c in launched] == [(estimator, options)]


def test_at_grpo_refuses_whole_conversation_samples(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("estimator: at_grpo\nprompt_style: full\nsample_unit: conversation\n")
    code, _, error = _invoke("--config", str(file), "--out", str(tmp_path / "runs"), "--dry-run")
    assert code != 0 and isinstance(error, MarsError)
    assert "one sample per reply" in str(error)


@pytest.mark.parametrize("setting", ["explore: 0.3", "branch_rate: 0.5", "keep_invalid: true"])
def test_local_only_tree_settings_are_refused_on_verl(tmp_path: Path, setting: str) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(f"estimator: at_grpo\ntree: {{{setting}}}\n")
    code, _, error = _invoke(
        "--trainer", "verl", "--config", str(file), "--run-dir", str(tmp_path / "v"), "--dry-run"
    )
    assert code != 0 and isinstance(error, MarsError)
    name = setting.partition(":")[0]
    assert f"tree.{name}" in str(error) and not (tmp_path / "v").exists()


def test_backend_is_the_model_servers_and_points_to_trainer(tmp_path: Path) -> None:
    # `--backend` names the model server in every command; the training commands' old use of it
    # for the trainer is one line pointing to --trainer.
    for command in ("train", "train-mas"):
        result = CliRunner().invoke(app, [command, "--backend", "verl", "--dry-run"])
        assert isinstance(result.exception, MarsError)
        assert str(result.exception) == (
            "--backend verl: --backend names the model server now; choose the trainer with "
            "--trainer verl"
        )
    _, _, error = _invoke("--trainer", "jax")
    assert isinstance(error, MarsError)
    assert str(error) == "--trainer must be one of local, verl, not 'jax'"


@pytest.mark.parametrize("flag", ["--base-url", "--backend", "--concurrency", "--cache"])
def test_model_options_a_trainer_cannot_honour_are_refused(tmp_path: Path, flag: str) -> None:
    value = {"--backend": "vllm", "--concurrency": "4"}.get(flag, "http://127.0.0.1:1/v1")
    for command in ("train", "train-mas"):
        result = CliRunner().invoke(app, [command, flag, value, "--out", str(tmp_path / "r")])
        assert isinstance(result.exception, MarsError), result.output
        assert str(result.exception) == (
            f"{flag} is not a mars {command} option: the trainer loads --model itself and talks "
            "to no model server"
        )
    assert not (tmp_path / "r").exists()


def test_max_new_tokens_still_works_with_a_deprecation_warning(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["train", "--max-new-tokens", "12", "--steps", "1", "--dry-run"]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert "warning: --max-new-tokens is deprecated; use --max-tokens" in result.output
    assert '"max_new_tokens": 12' in result.output
    code, output, _ = _invoke("--max-tokens", "13", "--steps", "1", "--dry-run")
    assert code == 0 and '"max_new_tokens": 13' in output and "deprecated" not in output
    _, _, error = _invoke("--max-tokens", "13", "--max-new-tokens", "12", "--dry-run")
    assert str(error) == "--max-tokens 13 and --max-new-tokens 12 disagree: use --max-tokens"
