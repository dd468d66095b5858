"""Trackers (`--logger`, `logger:`; core.trackers): a real CPU training run logs to
TensorBoard, W&B (offline) and MLflow (a file store), and what each one holds, read back with its
own reader, is metrics.jsonl's numbers at their steps and the run's config; a loop logs its
learning-curve rows; a missing package or an unknown name is one line before anything runs; verl
gets the names in `trainer.logger` and its trackers write into the run directory."""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from core.errors import MarsError
from core.runstore import RunDir
from core.trackers import (
    Trackers,
    check_loggers,
    flat_config,
    open_trackers,
    scalars,
    tracker_environment,
)
from mars.commands.logger_option import parse_loggers
from train_backend.config import TrainConfig, load_train_config
from train_backend.local.runlog import training_identity
from train_backend.local.trainer import train_local


@pytest.fixture(autouse=True)
def _offline_trackers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user setting leaks in, nothing is written outside tmp_path, and the MLflow switch
    the trackers set is undone afterwards."""
    torch.set_num_threads(1)
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "TENSORBOARD_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "")  # recorded as unset: restored after
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _same(got: float, want: float, rel: float = 1e-9) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return got == pytest.approx(want, rel=rel, abs=1e-12)


# -- what each tracker wrote, read back with its own reader -------------------------------------


def tensorboard_scalars(folder: Path) -> tuple[dict[str, dict[int, float]], Any]:
    """tag -> {step: value} of TensorBoard's event files, and the accumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    found = {
        tag: {event.step: event.value for event in events.Scalars(tag)}
        for tag in events.Tags()["scalars"]
    }
    return found, events


def tensorboard_config(events: Any) -> dict[str, Any]:
    text = events.Tensors("config/text_summary")[-1].tensor_proto.string_val[0].decode()
    return json.loads(text.strip().removeprefix("```").removesuffix("```"))


def wandb_records(run_dir: Path) -> list[Any]:
    """The records of the offline W&B run in `run_dir`, read from its `.wandb` file: W&B's
    log format (a 7-byte header, then 32 KiB blocks of chunks: CRC, length, type, data; a record
    is a whole chunk or first-middle-last), each record one `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2

    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    raw = path.read_bytes()
    assert raw[:4] == b":W&B"
    block, position, parts, records = 32768, 7, [], []
    while position + 7 <= len(raw):
        left = block - position % block
        if left < 7:  # the block's tail is padding
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        parts.append(raw[position + 7 : position + 7 + length])
        position += 7 + length
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
        elif kind == 0 and length == 0:
            parts = []
    return records


def wandb_history_and_config(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    history, config = [], {}
    for record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            history.append({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
    config.pop("_wandb", None)
    return history, config


def mlflow_run(run_dir: Path) -> tuple[Any, Any]:
    """(client, run) of the one MLflow run in RUN/mlruns."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("mars")
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def assert_mlflow_holds(run_dir: Path, rows: list[dict[str, Any]], config: dict[str, Any]) -> None:
    client, run = mlflow_run(run_dir)
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    assert run.data.params == flat_config(config)
    stored = Path(client.download_artifacts(run.info.run_id, "config.json", str(run_dir)))
    assert json.loads(stored.read_text()) == config
    keys = {key for row in rows for key in scalars(row)}
    # a file store's metric names have `.` for `/` (a metric is a file named after it)
    assert set(run.data.metrics) == {key.replace("/", ".") for key in keys}
    for key in keys:
        logged = client.get_metric_history(run.info.run_id, key.replace("/", "."))
        history = {m.step: m.value for m in logged}
        want = {row["step"]: scalars(row)[key] for row in rows if key in scalars(row)}
        assert set(history) == set(want), key
        assert all(_same(history[step], value) for step, value in want.items()), key


def assert_tensorboard_holds(folder: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    found, events = tensorboard_scalars(folder)
    want: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in scalars(row).items():
            want.setdefault(key, {})[row["step"]] = value
    assert set(found) == set(want)
    for key, by_step in want.items():
        assert set(found[key]) == set(by_step), key
        # TensorBoard keeps a scalar as a float32
        assert all(_same(found[key][s], v, rel=1e-6) for s, v in by_step.items()), key
    return tensorboard_config(events)


# -- a real training run -------------------------------------------------------------------------


def test_a_cpu_training_run_logs_its_metrics_and_config_to_each_tracker(tmp_path: Path) -> None:
    config = TrainConfig.for_local(
        games=["tic_tac_toe"], steps=2, games_per_step=2, max_new_tokens=8, eval_every=2,
        save_every=2, eval_episodes=1, eval_opponents={"tic_tac_toe": ["random"]},
        logger=["tensorboard", "wandb", "mlflow", "console"],
    )  # fmt: skip
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    train_local(config, run, command=["mars", "train"], log=lambda _line: None)

    rows = _lines(run.path / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2]  # step 0: the start policy's evaluation
    assert any(key.startswith("eval/") for key in rows[2])  # the eval step's figures too
    settings = config.model_dump(mode="json")
    assert RunDir.read_info(run.path).config == settings
    assert settings["logger"] == ["tensorboard", "wandb", "mlflow", "console"]

    assert assert_tensorboard_holds(run.path / "tensorboard", rows) == settings

    history, wandb_config = wandb_history_and_config(run.path)
    assert wandb_config == settings
    assert len(history) == len(rows)
    for logged, row in zip(history, rows, strict=True):
        want = {**scalars(row), "step": row["step"]}
        assert set(logged) == set(want)
        assert all(_same(logged[key], value) for key, value in want.items())

    assert_mlflow_holds(run.path, rows, settings)


def test_a_mas_training_run_logs_its_metrics(tmp_path: Path) -> None:
    from workflow_testkit import tiny_workflow_config, train_tiny_workflow

    config = tiny_workflow_config(steps=1, eval_every=0, save_every=1, logger="tensorboard")
    train_tiny_workflow(tmp_path / "mas", config)
    rows = _lines(tmp_path / "mas" / "metrics.jsonl")
    assert any(key.startswith("return_mean/") for key in rows[0])
    assert assert_tensorboard_holds(tmp_path / "mas" / "tensorboard", rows) == config.model_dump(
        mode="json"
    )


# -- the loop ------------------------------------------------------------------------------------


def test_a_loop_logs_each_learning_curve_row_it_evaluates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mars.orchestration.loop import flatten_row, parse_spec, run_loop
    from mars.orchestration.loop import runner as loop_runner

    watch = tmp_path / "checkpoints"
    for step in (1, 2):
        (watch / f"step_{step}").mkdir(parents=True)
        (watch / f"step_{step}" / "checkpoint.json").write_text(json.dumps({"step": step}))

    def evaluate(checkpoint: Any, spec: Any, loop_dir: Path, **_: Any) -> dict[str, Any]:
        step = checkpoint.step
        figures = {
            "kind": "exploit", "game": "kuhn_poker", "exploitability": 0.4 / step,
            "ci95": [0.1, 0.5], "nash_conv": 0.8 / step, "nash_conv_ci95": [0.2, 0.9],
            "invalid_rate": 0.0, "samples": 4, "action_shares": {"J": {"bet": 0.25 * step}},
            "run_dir": f"step_{step}-exploit", "error": None,
        }  # fmt: skip
        return {"step": step, "checkpoint": str(checkpoint.path), "error": None, "wall_s": 1.5,
                "evals": {"exploit-kuhn_poker": figures}}  # fmt: skip

    monkeypatch.setattr(loop_runner, "evaluate_checkpoint", evaluate)
    spec = parse_spec("exploit:kuhn_poker:4")
    run = RunDir.resolve(out=None, run_dir=tmp_path / "loop", kind="loop", slug="t")
    loop_config = {"watch": str(watch), "spec": spec.model_dump(), "once": True}
    run.start(command=["mars", "loop"], config=loop_config)
    seen: list[int] = []
    outcome = run_loop(
        watch,
        spec,
        run,
        once=True,
        logger=("tensorboard", "mlflow"),
        on_row=lambda row: seen.append(row["step"]),
    )
    assert outcome.evaluated == seen == [1, 2]  # the command's own on_row still runs
    rows = [flatten_row(row) for row in _lines(run.path / "learning_curve.jsonl")]
    assert scalars(rows[0])["exploit-kuhn_poker/exploitability"] == pytest.approx(0.4)
    assert scalars(rows[1])["exploit-kuhn_poker/policy/J/bet"] == pytest.approx(0.5)
    stored = RunDir.read_info(run.path).config
    assert assert_tensorboard_holds(run.path / "tensorboard", rows) == stored
    assert_mlflow_holds(run.path, rows, stored)
    _, mlflow = mlflow_run(run.path)
    assert mlflow.data.tags["mars.kind"] == "loop"

    # A rerun evaluates the new checkpoint only; the earlier rows' events stay.
    (watch / "step_3").mkdir()
    (watch / "step_3" / "checkpoint.json").write_text(json.dumps({"step": 3}))
    again = run_loop(watch, spec, run, once=True, logger=("tensorboard",))
    assert again.evaluated == [3] and again.skipped == [1, 2]
    rows = [flatten_row(row) for row in _lines(run.path / "learning_curve.jsonl")]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert_tensorboard_holds(run.path / "tensorboard", rows)


# -- resume, failures ----------------------------------------------------------------------------


def test_a_resumed_run_replaces_tensorboards_events_of_the_steps_it_makes_again(
    tmp_path: Path,
) -> None:
    with open_trackers(["tensorboard"], tmp_path, {"a": 1}, resume_step=0) as trackers:
        for step in (1, 2, 3):
            trackers.log({"step": step, "loss": float(step)}, step)
    with open_trackers(["tensorboard"], tmp_path, {"a": 1}, resume_step=1) as trackers:
        for step in (2, 3):
            trackers.log({"step": step, "loss": 10.0 * step}, step)
    found, _ = tensorboard_scalars(tmp_path / "tensorboard")
    assert found["loss"] == {1: 1.0, 2: 20.0, 3: 30.0}


def test_a_tracker_that_fails_while_logging_is_dropped_with_one_warning() -> None:
    class Broken:
        name = "wandb"
        closed = False

        def log(self, metrics: dict[str, float], step: int) -> None:
            raise OSError("disk full")

        def close(self, failed: bool) -> None:
            self.closed = True

    warnings: list[str] = []
    broken = Broken()
    trackers = Trackers([broken], warn=warnings.append)  # type: ignore[list-item]
    trackers.log({"loss": 1.0}, 1)
    trackers.log({"loss": 2.0}, 2)
    assert trackers.names == () and len(warnings) == 1
    assert "wandb logging failed (disk full)" in warnings[0]


def test_scalars_are_the_rows_numbers_nested_objects_flattened() -> None:
    row = {"step": 3, "loss": 0.5, "ok": True, "note": "x", "none": None, "list": [1, 2],
           "eval": {"random": {"win": 1, "ci": [0, 1]}}}  # fmt: skip
    assert scalars(row) == {"loss": 0.5, "ok": 1.0, "eval/random/win": 1}


# -- refusals before anything runs ---------------------------------------------------------------


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(MarsError) as error:
        parse_loggers("tensorboard,wandb")
    assert str(error.value) == (
        "--logger wandb needs the wandb package: pip install 'mars-harness[wandb]'"
    )
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(MarsError, match=r"mars-harness\[mlflow\]"):
        open_trackers(["mlflow"], Path("unused"), {})
    # In a config file: the training config's own one-line error, before any run directory.
    with pytest.raises(MarsError) as error:
        load_train_config(None, {"logger": ["wandb"]}, local=True)
    assert str(error.value) == (
        "bad training setting logger: wandb needs the wandb package: "
        "pip install 'mars-harness[wandb]'"
    )


def test_unknown_names_are_one_line_listing_the_known_ones() -> None:
    with pytest.raises(MarsError) as error:
        parse_loggers("tensorboard,wandbb")
    message = str(error.value)
    assert "\n" not in message and "unknown logger 'wandbb'" in message
    assert "known: console, mlflow, tensorboard, wandb" in message
    assert parse_loggers(None) is None  # not given: the config decides
    assert parse_loggers("none") == () == parse_loggers("")
    assert parse_loggers(" TensorBoard , console,tensorboard") == ("tensorboard", "console")
    assert check_loggers([]) == ()


def test_a_config_file_with_a_missing_tracker_is_refused_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from mars.main import app, register_commands

    register_commands()
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump({"logger": ["tensorboard"], "steps": 1}))
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["train", "--config", str(config_file), "--run-dir", str(run_dir)]
    )
    assert isinstance(result.exception, MarsError)
    assert "pip install 'mars-harness[tensorboard]'" in str(result.exception)
    assert not run_dir.exists()


def test_the_trackers_are_not_part_of_a_training_runs_identity() -> None:
    plain = TrainConfig.for_local().model_dump(mode="json")
    logged = TrainConfig.for_local(logger=["tensorboard"]).model_dump(mode="json")
    assert training_identity(plain) == training_identity(logged)  # a resume may change them


# -- verl ------------------------------------------------------------------------------------------


def test_verl_gets_the_trackers_in_trainer_logger_writing_into_the_run(tmp_path: Path) -> None:
    from train_backend.verl.overrides import RunPaths, verl_overrides, verl_settings

    paths = RunPaths(tmp_path / "run")
    plain = verl_settings(TrainConfig(model="m"), paths)
    assert plain["trainer.logger"] == ["console", "file"]
    assert "TENSORBOARD_DIR" not in plain["+ray_kwargs.ray_init.runtime_env.env_vars"]

    config = TrainConfig(model="m", logger=["console", "tensorboard", "wandb", "mlflow"])
    settings = verl_settings(config, paths)
    assert settings["trainer.logger"] == ["console", "file", "tensorboard", "wandb", "mlflow"]
    env = settings["+ray_kwargs.ray_init.runtime_env.env_vars"]
    root = (tmp_path / "run").resolve()
    assert env["TENSORBOARD_DIR"] == str(root / "tensorboard")
    assert env["WANDB_DIR"] == str(root) and env["WANDB_MODE"] == "offline"
    assert env["MLFLOW_TRACKING_URI"] == (root / "mlruns").as_uri()
    assert env["MLFLOW_ALLOW_FILE_STORE"] == "true"
    assert "trainer.logger=[console,file,tensorboard,wandb,mlflow]" in verl_overrides(config, paths)

    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    from train_backend.verl.compose import compose_verl_config

    composed = compose_verl_config(verl_overrides(config, paths), validate=False)
    assert list(composed.trainer.logger) == ["console", "file", "tensorboard", "wandb", "mlflow"]


def test_a_users_wandb_mode_and_mlflow_uri_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    env = tracker_environment(Path("/runs/r"), ["wandb", "mlflow"])
    assert env["WANDB_MODE"] == "online"
    assert env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:5000"
    assert "MLFLOW_ALLOW_FILE_STORE" not in env


def test_verls_own_trackers_write_where_the_run_directory_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's `Tracking` (what its trainer logs through), in the environment its workers get."""
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    from verl.utils.tracking import Tracking

    run_dir = tmp_path / "run"
    for key, value in tracker_environment(run_dir, ["tensorboard", "mlflow"]).items():
        monkeypatch.setenv(key, value)
    tracking = Tracking(
        project_name="mars",
        experiment_name="run",
        default_backend=["tensorboard", "mlflow"],
        config={"trainer": {"total_training_steps": 2}},
    )
    tracking.log({"actor/loss": 0.25}, step=1)
    tracking.log({"actor/loss": 0.5}, step=2)
    tracking.finish()
    found, _ = tensorboard_scalars(run_dir / "tensorboard")
    assert found["actor/loss"] == {1: 0.25, 2: 0.5}
    client, run = mlflow_run(run_dir)
    history = client.get_metric_history(run.info.run_id, "actor/loss")  # verl's own names
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5)]


# -- experiments -----------------------------------------------------------------------------------


def test_an_experiments_logger_goes_to_its_train_and_loop_parts(tmp_path: Path) -> None:
    from mars.orchestration.experiments import load_experiment
    from mars.orchestration.experiments.parts import resolve_parts
    from mars.orchestration.experiments.runner import _inputs

    spec = {
        "name": "logged",
        "logger": "tensorboard,wandb",
        "parts": [
            {"name": "train", "run": "train", "config": {"steps": 1}},
            {"name": "own", "run": "train", "args": {"logger": "mlflow"}},
            {"name": "loop", "run": "loop", "args": {"watch": "${part:train}", "once": True},
             "evals": ["exploit:kuhn_poker:4"]},
            {"name": "arena", "run": "arena", "args": {"game": "kuhn_poker"}},
        ],
    }  # fmt: skip
    path = tmp_path / "logged.yaml"
    path.write_text(yaml.safe_dump(spec))
    experiment = load_experiment(str(path))
    assert experiment.logger == ["tensorboard", "wandb"]
    parts = {item.part.name: item for item in resolve_parts(experiment, tmp_path, build=False)}

    def logger_of(name: str) -> list[str]:
        argv = parts[name].argv
        return [argv[i + 1] for i, arg in enumerate(argv) if arg == "--logger"]

    assert logger_of("train") == ["tensorboard,wandb"] == logger_of("loop")
    assert logger_of("own") == ["mlflow"]  # a part's own choice stands
    assert logger_of("arena") == []
    # Trackers change no result: a finished part is not redone for them.
    assert "--logger" not in _inputs(parts["train"], tmp_path)

    spec["logger"] = ["tensorbord"]
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(MarsError, match="unknown logger 'tensorbord'"):
        load_experiment(str(path))
