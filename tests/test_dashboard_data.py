"""The dashboard's loading and aggregation functions, without Streamlit's script runner."""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from core.errors import MarsError
from dashboard import cache, data, synthetic
from dashboard.paths import PathRefused, inside_root, runs_root

REPO = Path(__file__).resolve().parents[1]


def test_read_jsonl_skips_and_counts_every_kind_of_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(
        b'{"a": 1}\n'
        b"\n"
        b'{"a": 2, "cut short\n'
        b"[1, 2, 3]\n"
        b"\xff\xfe not utf-8\n"
        b'"just a string"\n'
        b'{"a": 3}'  # no final newline: still a record
    )
    loaded = data.read_jsonl(path)
    assert [r["a"] for r in loaded.rows] == [1, 3]
    assert loaded.malformed == 4
    assert data.read_jsonl(tmp_path / "missing.jsonl").rows == []


def test_cached_loads_follow_the_file_version(tmp_path: Path) -> None:
    run = synthetic.write_eval_run(tmp_path / "eval-x", [synthetic.eval_record(0)])
    first = cache.jsonl(tmp_path, run.records_path)
    assert cache.jsonl(tmp_path, run.records_path) is first  # served from the cache
    run.append(synthetic.eval_record(1, correct=False))
    second = cache.jsonl(tmp_path, run.records_path)
    assert second is not first and len(second.rows) == 2
    records, frame = cache.eval_data(tmp_path, run.records_path)
    assert list(frame["sample_id"]) == ["gsm8k-0", "gsm8k-1"] and records is second
    with pytest.raises(PathRefused):
        cache.jsonl(tmp_path / "eval-x", tmp_path / "eval-x" / ".." / "elsewhere.jsonl")


def test_inside_root_refuses_every_escape(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "a").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    assert inside_root(root, "a") == (root / "a").resolve()
    assert inside_root(root, root / "a" / "records.jsonl").name == "records.jsonl"
    for bad in ("..", "../outside", "a/../../outside", "/etc/passwd", "link", "a\x00b"):
        with pytest.raises(PathRefused):
            inside_root(root, bad)
    assert issubclass(PathRefused, MarsError)


def test_runs_root_prefers_env_then_argv(tmp_path: Path) -> None:
    assert runs_root(["--runs", str(tmp_path)], env={}) == tmp_path.resolve()
    env = {"MARS_RUNS_ROOT": str(tmp_path / "env")}
    assert runs_root(["--runs", str(tmp_path)], env=env) == (tmp_path / "env").resolve()
    assert runs_root([], env={}) == Path("runs").resolve()


def test_discover_runs_newest_first_with_kinds(tmp_path: Path) -> None:
    synthetic.write_eval_run(tmp_path / "eval-1", [synthetic.eval_record(0)])
    synthetic.write_train_run(tmp_path / "loop" / "train-1", 2)  # nested one level
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    runs = data.discover_runs(tmp_path)
    assert {r.name: r.kind for r in runs} == {"eval-1": "eval", "loop/train-1": "train"}
    assert next(r for r in runs if r.kind == "train").has_metrics


def test_accuracy_rows_keep_errors_apart() -> None:
    records = [synthetic.eval_record(i, correct=i < 3) for i in range(5)]
    records.append(synthetic.eval_record(5, correct=False, error="boom"))
    (row,) = data.accuracy_rows(data.eval_frame(records), run="r", mas="mad", model="m")
    assert (row["n"], row["correct"], row["errors"]) == (5, 3, 1)
    assert row["accuracy"] == pytest.approx(0.6)


def test_filter_samples_combines_filters() -> None:
    records = [synthetic.eval_record(i, correct=i % 2 == 0) for i in range(10)]
    records.append(synthetic.eval_record(10, correct=False, extraction_failed=True))
    frame = data.eval_frame(records)
    wrong = data.filter_samples(frame, correctness="wrong")
    assert list(wrong["sample_id"]) == [f"gsm8k-{i}" for i in (1, 3, 5, 7, 9, 10)]
    no_extraction = data.filter_samples(frame, correctness="wrong", extraction="none")
    assert len(no_extraction) == 5
    found = data.filter_samples(frame, text="MODERATOR THINKS ABOUT SAMPLE 7>")
    assert list(found["sample_id"]) == ["gsm8k-7"]
    assert data.filter_samples(frame, suites=["math500"]).empty


@pytest.mark.parametrize(
    "summary",
    [
        {"game": "kuhn_poker", "seats": {"first": {"n": 1}}},
        {"arenas": [{"game": "kuhn_poker", "seats": {"first": {"n": 1}}}]},
        {"games": {"kuhn_poker": {"seats": {"first": {"n": 1}}}}},
    ],
)
def test_arena_summaries_in_any_wrapping(summary: dict) -> None:
    (found,) = data.arena_summaries(summary)
    assert found["game"] == "kuhn_poker" and found["seats"]["first"]["n"] == 1


def test_arena_summaries_ignore_other_shapes() -> None:
    assert data.arena_summaries(None) == []
    assert data.arena_summaries({"suites": {"gsm8k": {}}}) == []


def test_replay_turns_tolerate_missing_fields() -> None:
    record = synthetic.arena_record(7, "second", outcome="draw")
    record["turns"].append({"seat": 1})  # a turn with nothing else
    record["turns"].append("garbage")
    turns = data.replay_turns(record)
    assert len(turns) == 4
    assert turns[1].seat_label == "second (model) [player]" and turns[1].is_model
    assert turns[1].state == "board at step 1 (seed 7)"
    assert turns[3].action is None and turns[3].reward is None and not turns[3].is_model


def test_metrics_frame_flattens_and_reads_win_rates() -> None:
    rows = [
        {"step": 2, "loss": 0.5, "eval": {"random": {"second": {"win": 0.6}}}},
        {"step": 1, "loss": 0.9, "eval": {"random": {"second": {"win": 0.4}}}},
        {"step": "bad", "loss": 0.1},
    ]
    rows[0]["eval"]["random"]["second"].update(win_ci_low=0.5, win_ci_high=0.7)
    frame = data.metrics_frame(rows)
    assert list(frame["step"]) == [1, 2]  # sorted, the bad step dropped
    assert "eval/random/second/win" in data.numeric_columns(frame)
    wins = data.win_rate_table(frame)
    assert list(wins["win"]) == [0.4, 0.6]
    assert wins.iloc[1]["ci_low"] == 0.5 and pd.isna(wins.iloc[0]["ci_low"])


def test_win_rates_in_the_cpu_trainers_format() -> None:
    cell = {"n": 4, "win": 0.25, "ci95_low": 0.05, "ci95_high": 0.7, "normalized_return": 40.0}
    frame = data.metrics_frame([{"step": 3, "eval": {"tic_tac_toe": {"random": {"first": cell}}}}])
    wins = data.win_rate_table(frame)
    assert wins.to_dict("records") == [
        {
            "step": 3,
            "game": "tic_tac_toe",
            "opponent": "random",
            "seat": "first",
            "win": 0.25,
            "ci_low": 0.05,
            "ci_high": 0.7,
        }
    ]


def test_learning_curve_jsonl_is_flattened_like_the_csv(tmp_path: Path) -> None:
    path = tmp_path / "learning_curve.jsonl"
    row = {"step": 2, "evals": {"gsm8k": {"accuracy": 0.5, "ci95": [0.2, 0.8]}}}
    path.write_text(json.dumps(row) + "\n[1, 2]\n")
    loaded = data.learning_curve(path)
    assert loaded.rows == [{"step": 2, "evals/gsm8k/accuracy": 0.5, "evals/gsm8k/ci95": [0.2, 0.8]}]
    assert loaded.malformed == 1


def test_learning_curve_csv_counts_ragged_rows(tmp_path: Path) -> None:
    path = tmp_path / "learning_curve.csv"
    path.write_text("step,gsm8k,checkpoint\n0,0.5,base\n10,0.625,ckpt-10\n20,0.7,x,extra\n")
    loaded = data.learning_curve(path)
    assert loaded.rows == [
        {"step": 0, "gsm8k": 0.5, "checkpoint": "base"},
        {"step": 10, "gsm8k": 0.625, "checkpoint": "ckpt-10"},
    ]
    assert loaded.malformed == 1


def test_dashboard_imports_only_harness() -> None:
    forbidden = {"mas", "games", "train_backend"}
    # The exceptions, imported when first used: replays are rebuilt by the game code, and the
    # poker panels read the game solvers (tests/test_layers.py has the same rule).
    allowed = {
        ("boards.py", "games.positions"),
        ("equilibrium.py", "games.solvers"),
        ("policy.py", "games.solvers"),
    }
    for path in (REPO / "dashboard").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if (path.name, name) in allowed:
                    continue
                assert name.split(".")[0] not in forbidden, f"{path} imports {name}"
    code = (
        "import sys, dashboard.data, dashboard.cache, dashboard.views.runs, "
        "dashboard.views.samples, dashboard.views.failures, dashboard.views.games, "
        "dashboard.views.training, dashboard.views.mas_training, dashboard.mas_data, "
        "dashboard.boards; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'mas', 'games', 'train_backend', 'openai', 'torch'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert json.loads(out.stdout.strip().replace("'", '"')) == []


def test_mars_dashboard_command_line_checks(tmp_path: Path) -> None:
    from mars.commands.dashboard import check_port, dashboard_command, streamlit_command

    command = streamlit_command(tmp_path, 8765)
    assert command[1:4] == ["-m", "dashboard.serve", "run"]
    assert command[4].endswith("dashboard/app.py")
    joined = " ".join(command)
    assert "--server.headless true" in joined and "--server.address 127.0.0.1" in joined
    assert command[-3:] == ["--", "--runs", str(tmp_path)]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(MarsError, match="in use"):
            check_port(busy.getsockname()[1])
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(MarsError, match="not a directory"):
        dashboard_command(runs=a_file, port=0)


def test_action_shares_come_from_training_metrics_and_loop_curves() -> None:
    from train_backend.local.exploitability import metrics_of

    summary = {
        "game": "kuhn_poker",
        "exploitability": 0.2,
        "nash_conv": 0.4,
        "ci95": [0.1, 0.3],
        "invalid_rate": 0.0,
        "action_shares": {"J -": {"PASS": 0.9, "BET": 0.1}, "K b": {"PASS": 0.0, "BET": 1.0}},
    }
    metrics = pd.DataFrame([{"step": 10, **metrics_of(summary, 32)}])
    table = data.action_share_table(metrics)
    bets = table[table["action"] == "BET"].set_index("state")["share"].to_dict()
    assert bets == {"J -": 0.1, "K b": 1.0}
    assert set(table["game"]) == {"kuhn_poker"} and set(table["x"]) == {10}

    curve = pd.DataFrame([{"step": 0, "exploit-kuhn_poker/policy/Q p/BET": 0.5, "other": 1}])
    row = data.action_share_table(curve).iloc[0].to_dict()
    assert row == {
        "x": 0,
        "game": "exploit-kuhn_poker",
        "state": "Q p",
        "action": "BET",
        "share": 0.5,
    }


def test_the_server_warms_the_first_page_and_the_app_names_every_page() -> None:
    """The server imports the first page's modules while it starts (`FIRST_PAGE_MODULES`, the
    Runs view among them) and draws its chart once; the app's `PAGES` name every module of
    dashboard/views that draws a page, which it imports on demand and warms after the first."""
    import ast

    from dashboard import serve

    assert "dashboard.views.runs" in serve.FIRST_PAGE_MODULES
    serve._warm_charts()  # the first page's chart builds outside a page (raises if it cannot)
    app = Path(serve.__file__).with_name("app.py")
    pages = next(
        ast.literal_eval(node.value)
        for node in ast.walk(ast.parse(app.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "PAGES" for t in node.targets)
    )
    views = Path(serve.__file__).with_name("views")
    drawing = {f.stem for f in views.glob("*.py") if "\ndef render(" in f.read_text()}
    assert set(pages.values()) <= drawing
    sections = drawing - set(pages.values())  # drawn inside a page (the Training page's)
    training = (views / "training.py").read_text()
    assert f"from dashboard.views import {', '.join(sorted(sections))}" in training, sections


def test_last_values_go_in_two_narrow_tables() -> None:
    """The run-wide figures one row per run; a figure's per-game, per-seat splits one row per
    (run, split), so that many splits lengthen a table instead of widening it past the page."""
    from dashboard.data.training import last_values_tables

    rows = [
        {"step": 1, "loss": 0.5, "reward_mean": -1.0, "reward_mean/kuhn_poker/first": -2.0},
        {"step": 2, "loss": 0.4, "reward_mean": 0.5, "reward_mean/kuhn_poker/first": 1.0},
    ]
    frames = {"a": data.metrics_frame(rows), "b": data.metrics_frame([{"step": 3, "loss": 0.1}])}
    plans = {n: data.plan_families(data.numeric_columns(f), curve=False) for n, f in frames.items()}
    runs, splits = last_values_tables(frames, plans, ["reward_mean", "loss", "kl"])
    assert list(runs.columns) == ["run", "steps", "last step", "reward_mean", "loss"]
    assert runs.to_dict("records")[0] == {
        "run": "a", "steps": 2, "last step": 2, "reward_mean": 0.5, "loss": 0.4,
    }  # fmt: skip
    assert pd.isna(runs.iloc[1]["reward_mean"]) and runs.iloc[1]["loss"] == 0.1
    assert splits.to_dict("records") == [
        {"run": "a", "split": "kuhn_poker/first", "reward_mean": 1.0}
    ]


def test_a_loops_curve_turns_on_its_side_with_its_first_and_last_checkpoints() -> None:
    from dashboard.data.training import curve_table

    frame = pd.DataFrame(
        [
            {"step": s, "checkpoint": f"/runs/train/checkpoints/step_{s}", "gsm8k": s / 30}
            for s in range(0, 50, 10)
        ]
    )
    table, checkpoints = curve_table(frame, "step", most=3)
    assert checkpoints == 5
    assert list(table.columns) == ["figure", "step 0", "step 30", "step 40"]
    assert list(table["figure"]) == ["checkpoint", "gsm8k"]
    assert list(table.iloc[0])[1:] == ["step_0", "step_30", "step_40"]  # a path by its last part
    assert list(table.iloc[1])[1:] == ["0", "1", "1.333"]
    whole, checkpoints = curve_table(frame, "step", most=9)
    assert whole.shape == (2, 6) and checkpoints == 5
