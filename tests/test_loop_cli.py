"""`mars loop` end to end: fake checkpoints (copies of the tiny model) served by a real
`transformers serve` on 127.0.0.1, evaluated by the real `mars arena` in a subprocess."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mars.orchestration.loop.command  # noqa: F401  (registers the command on the app)
from core.runstore import RunDir
from mars.main import app, register_commands

register_commands()  # with one command only, typer would make `loop` the whole app

pytestmark = pytest.mark.slow

SPEC = "arena:tic_tac_toe:random:2"
KEY = "arena-tic_tac_toe-random"


def _copy_checkpoint(source: Path, root: Path, step: int, *, complete: bool) -> Path:
    folder = root / f"step_{step}"
    shutil.copytree(source, folder)
    if complete:
        _complete(folder, step)
    return folder


def _complete(folder: Path, step: int) -> None:
    config = {"prompt_style": "compact", "max_new_tokens": 24}
    info = {"step": step, "config": config, "metrics": {"reward": 0.1 * step}}
    (folder / "checkpoint.json").write_text(json.dumps(info))


def _loop(watch: Path, run_dir: Path) -> list[dict]:
    result = CliRunner().invoke(
        app, ["loop", "--watch", str(watch), "--eval", SPEC, "--once", "--run-dir", str(run_dir)]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    lines = (run_dir / "learning_curve.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_each_complete_checkpoint_is_evaluated_once_and_broken_ones_give_error_rows(
    tmp_path: Path,
) -> None:
    from core.tiny_model import ensure_tiny_model

    tiny = ensure_tiny_model()
    watch, run_dir = tmp_path / "checkpoints", tmp_path / "loop"
    _copy_checkpoint(tiny, watch, 1, complete=True)
    second = _copy_checkpoint(tiny, watch, 2, complete=False)  # still being written

    rows = _loop(watch, run_dir)
    assert [row["step"] for row in rows] == [1]
    first = rows[0]
    assert first["error"] is None and first["train_metrics"] == {"reward": 0.1}
    assert first["settings"]["prompt_style"] == "compact"  # taken from checkpoint.json
    entry = first["evals"][KEY]
    assert entry["error"] is None and entry["prompt_style"] == "compact"
    for seat in ("first", "second"):
        stats = entry["seats"][seat]
        assert stats["n"] == 2
        assert stats["win"] + stats["draw"] + stats["loss"] == pytest.approx(1.0)
        assert 0.0 <= stats["normalized_return"] <= 100.0
    sub_run = RunDir.open(run_dir / entry["run_dir"])
    assert sub_run.info().kind == "arena" and sub_run.info().status == "completed"
    assert "--base-url" in sub_run.info().command  # it ran against the loop's own server
    assert len(sub_run.records()) == 4  # 2 episodes x 2 seats

    # The trainer finishes step 2; meanwhile a broken step 3 appears (weights cut short).
    _complete(second, 2)
    broken = _copy_checkpoint(tiny, watch, 3, complete=True)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])

    rows = _loop(watch, run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert rows[0]["evaluated_at"] == first["evaluated_at"]  # not evaluated again
    assert len(sub_run.records()) == 4
    assert rows[1]["error"] is None and rows[1]["evals"][KEY]["seats"]["first"]["n"] == 2
    assert rows[2]["error"].startswith("serving failed") and rows[2]["evals"] == {}

    with (run_dir / "learning_curve.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert [line["step"] for line in table] == ["1", "2", "3"]
    assert table[0][f"{KEY}/first/n"] == "2" and table[0][f"{KEY}/run_dir"] == entry["run_dir"]
    assert table[2]["error"].startswith("serving failed")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["evaluated_now"] == [2, 3] and summary["skipped"] == [1]
    assert summary["error_steps"] == [3]
    assert RunDir.read_info(run_dir).status == "completed_with_errors"


def test_a_baseline_is_evaluated_once_as_step_0_with_the_first_checkpoints_settings(
    tmp_path: Path,
) -> None:
    from core.tiny_model import ensure_tiny_model

    tiny = ensure_tiny_model()
    watch, run_dir = tmp_path / "checkpoints", tmp_path / "loop"
    _copy_checkpoint(tiny, watch, 3, complete=True)
    args = ["loop", "--watch", str(watch), "--eval", SPEC, "--once", "--run-dir", str(run_dir)]
    result = CliRunner().invoke(app, [*args, "--baseline", str(tiny)])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = [
        json.loads(line) for line in (run_dir / "learning_curve.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [0, 3]
    start = rows[0]
    assert start["baseline"] is True and start["checkpoint"] == str(tiny.resolve())
    assert start["error"] is None and start["train_metrics"] is None
    # The baseline has no checkpoint.json: it is played as the first checkpoint was trained.
    assert start["settings"]["prompt_style"] == "compact" and start["settings"]["max_tokens"] == 24
    assert start["evals"][KEY]["seats"]["first"]["n"] == 2

    again = CliRunner().invoke(app, [*args, "--baseline", str(tiny)])
    assert again.exit_code == 0, again.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["evaluated_now"] == [] and summary["skipped"] == [0, 3]
    bad = CliRunner().invoke(app, [*args, "--baseline", str(tmp_path)])
    assert "is not a model folder" in str(bad.exception)


def test_loop_rejects_bad_input_before_serving(tmp_path: Path) -> None:
    from core.errors import MarsError

    runner = CliRunner()
    missing = runner.invoke(
        app, ["loop", "--watch", str(tmp_path / "nope"), "--eval", SPEC, "--once"]
    )
    assert isinstance(missing.exception, MarsError)
    bad_game = runner.invoke(
        app, ["loop", "--watch", str(tmp_path), "--eval", "arena:chess:random:2", "--once"]
    )
    assert isinstance(bad_game.exception, MarsError) and "chess" in str(bad_game.exception)


def test_loop_follows_a_real_local_training_run_until_it_finishes(tmp_path: Path) -> None:
    """`mars train --trainer local` in one process, `mars loop` watching its run in another:
    every checkpoint the trainer saves gets a row, and the loop stops when training has ended."""
    from conftest import REPO, mars_env

    train_dir, loop_dir = tmp_path / "train", tmp_path / "loop"
    trainer = subprocess.Popen(
        [
            sys.executable, "-m", "mars", "train", "--trainer", "local",
            "--games", "tic_tac_toe", "--steps", "2", "--games-per-step", "2",
            "--max-tokens", "16", "--eval-every", "0", "--save-every", "1",
            "--threads", "1", "--run-dir", str(train_dir),
        ],
        cwd=REPO, env=mars_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        loop = subprocess.run(
            [
                sys.executable, "-m", "mars", "loop", "--watch", str(train_dir),
                "--eval", SPEC, "--poll", "1", "--timeout", "600", "--run-dir", str(loop_dir),
            ],
            cwd=REPO, env=mars_env(), capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    finally:
        train_output, _ = trainer.communicate(timeout=600)
    assert trainer.returncode == 0, train_output
    assert loop.returncode == 0, loop.stdout + loop.stderr
    assert "(training finished)" in loop.stdout
    rows = [
        json.loads(line) for line in (loop_dir / "learning_curve.jsonl").read_text().splitlines()
    ]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["error"] is None
        assert row["settings"]["prompt_style"] == "compact"  # the trainer's, from checkpoint.json
        assert row["settings"]["max_tokens"] == 16
        assert set(row["train_metrics"]) >= {"reward_mean", "loss"}
        seats = row["evals"][KEY]["seats"]
        assert seats["first"]["n"] == seats["second"]["n"] == 2

    # The dashboard's Training page shows this real loop's curve on its side: one row per
    # figure, one column per checkpoint, numbers to 4 significant digits.
    from dashboard_apptest import page_opener, table_with

    with page_opener(tmp_path) as open_page:
        page = open_page("Training")
    curve = table_with(page, "figure", "step 1", "step 2").set_index("figure")
    win = curve.loc[f"{KEY}/first/win"]
    assert [float(win["step 1"]), float(win["step 2"])] == pytest.approx(
        [row["evals"][KEY]["seats"]["first"]["win"] for row in rows], abs=5e-4
    )
