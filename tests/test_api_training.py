"""`mars.api.train` from Python: one real step on the embedded tiny model, its result read back
from the run folder, and a bad argument refused with the command's own one-line message."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from core.errors import MarsError
from mars.api.results import Figure, RunResult, open_run
from mars.api.train import TrainPlan, train

# One step of two kuhn_poker games, evaluated at its end against random (3 episodes a seat).
SETTINGS = {"eval_episodes": 3, "eval_opponents": {"kuhn_poker": ["random"]}}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _last_metrics(run_dir: Path) -> dict:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def test_train_returns_the_run_with_its_metrics_as_figures(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = train(
        games="kuhn_poker",
        steps=1,
        games_per_step=2,
        max_tokens=8,
        eval_every=1,
        settings=SETTINGS,
        run_dir=run_dir,
        quiet=True,
    )
    assert isinstance(result, RunResult) and result.kind == "train"
    assert result.run_dir == run_dir and (run_dir / "run.json").is_file()
    last = _last_metrics(run_dir)
    headline = {
        key: float(value)
        for key, value in last.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and not key.startswith(("eval/", "exploitability/"))
    }
    assert {key: result.figures[key].value for key in headline} == headline
    assert result.figures["step"] == Figure(1.0)
    # The in-training evaluation: each seat's win rate with its interval and episode count.
    assert result.figures["evaluation_step"].value == 1.0
    for seat in ("first", "second"):
        prefix = f"eval/kuhn_poker/random/{seat}"
        figure = result.figures[f"{prefix}/win"]
        assert figure.value == last[f"{prefix}/win"]
        assert figure.ci95 == (last[f"{prefix}/ci95_low"], last[f"{prefix}/ci95_high"])
        assert figure.n == last[f"{prefix}/n"] == 3
    assert result.summary["last_metrics"] == last
    assert len(result.records()) == 2  # the step's two self-play games
    assert {record["kind"] for record in result.records()} == {"selfplay"}
    assert json.loads((run_dir / "run.json").read_text())["config"]["max_new_tokens"] == 8

    reopened = open_run(run_dir)  # a run opened later reads back the same result
    assert (reopened.kind, reopened.figures, reopened.summary) == (
        "train",
        result.figures,
        result.summary,
    )


def test_a_plan_and_a_dry_run(tmp_path: Path) -> None:
    plan = TrainPlan(games=["kuhn_poker"], steps=3, max_tokens=12, out=tmp_path / "runs")
    result = train(dataclasses.replace(plan, dry_run=True))
    assert result.summary["dry_run"] is True and result.figures == {}
    assert result.summary["config"]["steps"] == 3
    assert result.summary["config"]["max_new_tokens"] == 12
    assert not (tmp_path / "runs").exists()  # a dry run on the local trainer makes no folder


@pytest.mark.parametrize(
    ("kwargs", "argv"),
    [
        ({"estimator": "ppo"}, ["--estimator", "ppo"]),
        ({"games": "tic_tac_toe,chess"}, ["--games", "tic_tac_toe,chess"]),
        ({"trainer": "jax"}, ["--trainer", "jax"]),
        ({"device": "cpu"}, ["--device", "cpu"]),
    ],
)
def test_a_bad_argument_is_the_commands_one_line_error(
    tmp_path: Path, kwargs: dict, argv: list[str]
) -> None:
    from mars.main import app, register_commands

    register_commands()
    out = tmp_path / "runs"
    with pytest.raises(MarsError) as raised:
        train(out=out, dry_run=True, **kwargs)
    result = CliRunner().invoke(app, ["train", *argv, "--out", str(out), "--dry-run"])
    assert isinstance(result.exception, MarsError)
    assert str(raised.value) == str(result.exception)
    assert "\n" not in str(raised.value)
    assert not out.exists()


def test_an_unknown_argument_names_the_closest_field() -> None:
    with pytest.raises(MarsError, match="did you mean 'max_tokens'"):
        train(max_new_tokens=8)
    with pytest.raises(MarsError, match="give a TrainPlan or keyword arguments, not both"):
        train(TrainPlan(), steps=1)


def test_train_mas_dry_run_returns_the_checked_config(tmp_path: Path) -> None:
    from mars.api.train_mas import train_mas

    result = train_mas(
        workflow="reasoner_tool", policies={"tool": "a", "reasoner": "b"}, max_tokens=20,
        seed=3, out=tmp_path / "runs", dry_run=True,
    )  # fmt: skip
    config = result.summary["config"]
    assert (config["max_new_tokens"], config["seed"]) == (20, 3)
    assert config["policies"] == {"tool": "a", "reasoner": "b"}
    assert not (tmp_path / "runs").exists()


def test_an_experiments_dry_run_returns_each_part_checked(tmp_path: Path) -> None:
    from mars.orchestration.experiments import load_experiment
    from mars.orchestration.experiments.api import experiment

    result = experiment(name="marshal-mini", run_dir=str(tmp_path / "e"), dry_run=True)
    parts = [part.name for part in load_experiment("marshal-mini").parts]
    assert list(result.parts) == parts and set(result.parts.values()) == {"not run"}
    assert [line.split(":")[0] for line in result.checked] == parts
    assert result.exit_code == 0 and result.report == "" and not (tmp_path / "e").exists()


def test_the_learning_curve_as_figures() -> None:
    from mars.api.results import curve_figures

    seat = {"normalized_return": 40.0, "normalized_return_ci": [10.0, 70.0], "n": 2}
    rows = [
        {
            "step": 1,
            "evals": {
                "arena-ttt": {"kind": "arena", "seats": {"first": seat}, "error": None},
                "eval-gsm8k": {"kind": "suite", "accuracy": 0.5, "ci95": [0.1, 0.9], "n": 4},
                "exploit-kuhn": {"kind": "exploit", "error": "exploit failed (exit code 1)"},
            },
        },
        {"step": 2, "error": "serving failed"},
    ]
    assert curve_figures(rows) == {
        "step_1/arena-ttt/first": Figure(40.0, (10.0, 70.0), 2),
        "step_1/eval-gsm8k": Figure(0.5, (0.1, 0.9), 4),
        "step_1/exploit-kuhn": Figure(None),
        "step_2": Figure(None),
    }
