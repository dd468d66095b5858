"""The dashboard's layout fixes: a loop's learning curve folded into one chart per figure (bounds
as bands, action shares left to the heatmap), runs nested below a demo folder listed, "-" in
empty cells, the question as a table column, a zero-accuracy bar still a mark of its series.
Run directories written with core.runstore.RunDir, pages read through Streamlit's AppTest."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_apptest import chart_specs, page_opener, row_where, table_with, texts

from core.runstore import RunDir
from dashboard import data, synthetic
from dashboard.views.common import PALETTE, display_frame, number_format, step_x, table_config
from dashboard.views.runs import accuracy_chart

STATES = [f"{card} {history}" for card in "JQK" for history in ("-", "p", "b", "pb")]
ITEM = "exploit-kuhn_poker"


def _curve_rows() -> list[dict[str, Any]]:
    """A loop's learning_curve.csv as `mars loop` writes it for one exploitability item: the
    figure, its bounds, NashConv and its bounds, invalid rate, samples and 24 action shares."""
    rows = []
    for step, value in ((0, 0.5), (10, 0.4), (20, 0.3)):
        row: dict[str, Any] = {"step": step, "checkpoint": f"c/{step}", "error": "", "wall_s": 3}
        for figure, v in (("exploitability", value), ("nash_conv", 2 * value)):
            row |= {f"{ITEM}/{figure}": v, f"{ITEM}/{figure}_ci95_low": v - 0.05}
            row |= {f"{ITEM}/{figure}_ci95_high": v + 0.05}
        row |= {f"{ITEM}/invalid_rate": 0.0, f"{ITEM}/samples": 3}
        row |= {f"{ITEM}/policy/{s}/{a}": 0.5 for s in STATES for a in ("PASS", "BET")}
        rows.append(row | {f"{ITEM}/run_dir": f"step_{step}-{ITEM}"})
    return rows


def _run(path: Path, kind: str) -> RunDir:
    run = RunDir.resolve(out=None, run_dir=path, kind=kind, slug=kind)
    run.start(command=["mars", kind], config={}, model="tiny")
    return run


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    demo = root / "demo-1"
    loop = _run(demo / "loop", "loop")
    rows = _curve_rows()
    with (loop.path / "learning_curve.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    loop.finish()
    # The loop's evaluation, three levels below the root, with no interval: "-" in its cells.
    exploit = _run(demo / "loop" / f"step_10-{ITEM}", "exploitability")
    exploit.write_summary({"game": "kuhn_poker", "player": "llm", "exploitability": 0.4})
    exploit.finish()
    train = _run(demo / "train", "train")
    with (train.path / "metrics.jsonl").open("w") as handle:
        for step in range(3):
            row = {"step": step, "loss": 1 / (step + 1), "reward_mean": 0.1 * step}
            row |= {"reward_mean/kuhn_poker/first": 0.2 * step, "policy/kuhn_poker/J -/BET": 0.5}
            handle.write(json.dumps(row) + "\n")
    train.finish()
    # Never listed: a run.json under checkpoints/, and one five levels down.
    for path in (demo / "train" / "checkpoints" / "step_2", root / "a" / "b" / "c" / "d" / "e"):
        _run(path, "eval").finish()
    records = [synthetic.eval_record(i, correct=i != 1) for i in range(3)]
    records.append(synthetic.eval_record(3, correct=False, error="EndpointError: gave up"))
    records.append(synthetic.eval_record(4, correct=False, extraction_failed=True))
    records += [synthetic.eval_record(i, suite="math500", correct=False) for i in range(4)]
    synthetic.write_eval_run(demo / "eval", records)
    return root


@pytest.fixture
def app(root: Path) -> Iterator[Any]:
    with page_opener(root) as open_page:
        yield open_page


def test_runs_below_a_demo_folder_are_listed(root: Path) -> None:
    names = sorted(entry.name for entry in data.scan_runs(root).entries)
    assert names == [
        "demo-1/eval",
        "demo-1/loop",
        f"demo-1/loop/step_10-{ITEM}",
        "demo-1/train",
    ]


def test_the_loops_curve_is_one_chart_per_figure(app: Any) -> None:
    test = app("Training")
    test.multiselect(key="train_metrics").set_value(["reward_mean", "loss"]).run()
    specs = chart_specs(test)
    titles = [s.get("title") for s in specs if isinstance(s.get("title"), str)]
    # metrics.jsonl: reward_mean and its per-game split in one chart; the loop: one chart per
    # figure (exploitability has its own section), bounds folded, no share drawn apart.
    assert titles == [
        "reward_mean",
        "loss",
        "demo-1/train · kuhn_poker",  # the card-use heatmaps
        f"demo-1/loop · {ITEM}",
        "wall_s",
        "nash_conv",
        "invalid_rate",
        "samples",
    ]
    assert len(specs) == len(titles) + 1  # + the exploitability chart
    nash = next(s for s in specs if s.get("title") == "nash_conv")
    assert [layer["mark"]["type"] for layer in nash["layer"]] == ["area", "line"]  # the band
    assert all(s.get("autosize", {}).get("type") == "fit-x" for s in specs)
    captions = " ".join(texts(test.caption))
    assert "1 `policy/<state>/<action>` column in the card-use heatmap." in captions  # metrics
    loop = "4 interval columns drawn as bands on their figure; 24 `policy/<state>/<action>` "
    assert loop + "columns in the card-use heatmap." in captions
    latest = table_with(test, "run", "steps", "last step")
    assert row_where(latest, run="demo-1/train")["reward_mean"] == pytest.approx(0.2)
    # A figure's per-game, per-seat split: a row of its own, not a column that widens the table.
    splits = table_with(test, "run", "split")
    assert row_where(splits, split="kuhn_poker/first")["reward_mean"] == 0.4


def test_empty_cells_read_dash_and_the_question_is_a_column(app: Any) -> None:
    runs = app("Runs")
    exploit = table_with(runs, "exploitability", "nash_conv", "95% CI")
    row = row_where(exploit, run=f"demo-1/loop/step_10-{ITEM}")
    assert (row["95% CI"], row["nash_conv"], row["exploitability"]) == ("-", "-", 0.4)
    assert row["policy"] == "llm"
    assert "None" not in exploit.astype(str).to_numpy().ravel().tolist()

    samples = app("Samples", run="demo-1/eval")
    table = table_with(samples, "sample_id", "question", "error")
    assert row_where(table, sample_id="gsm8k-1")["question"] == "Question 1: what is 1 modulo 97?"
    assert row_where(table, sample_id="gsm8k-0")["error"] == "-"
    assert row_where(table, sample_id="gsm8k-4")["extracted"] == "-"  # nothing extracted


def test_display_frame_keeps_complete_columns_typed() -> None:
    frame = pd.DataFrame({"n": [1, 2], "rate": [0.25, None], "name": ["a", None]})
    shown = display_frame(frame)
    assert list(shown["rate"]) == ["0.25", "-"] and list(shown["name"]) == ["a", "-"]
    assert shown["n"].dtype == frame["n"].dtype
    complete = frame[["n"]]
    assert display_frame(complete) is complete and frame["rate"].isna().sum() == 1  # not changed


def test_a_zero_accuracy_bar_is_a_mark_of_its_series() -> None:
    table = data.accuracy_table(
        [
            {"suite": "math500", "mas": "single", "model": "tiny", "run": "a-long-run-name",
             "n": 5, "correct": 0, "accuracy": 0.0, "ci_low": 0.0, "ci_high": 0.434},
        ]
    )  # fmt: skip
    spec = accuracy_chart(table).to_dict()
    marks = {layer["mark"]["type"]: layer for layer in spec["layer"]}
    assert set(marks) == {"bar", "rule", "point", "text"}
    # The whisker is grey; the point at the value carries the series' colour, the text its value.
    assert marks["rule"]["encoding"]["color"] == {"value": "#555555"}
    assert marks["point"]["encoding"]["y"]["field"] == "accuracy"
    assert marks["text"]["encoding"]["text"]["field"] == "accuracy"
    legend = spec["layer"][0]["encoding"]["color"]["legend"]
    assert (legend["orient"], legend["labelLimit"]) == ("bottom", 0)
    assert spec["autosize"]["type"] == "fit-x" and spec["height"] == 320


def test_numbers_are_shown_to_their_precision() -> None:
    """Each numeric column's format shows its numbers to 3 significant digits each: a reward of
    0.05 beside one of -11 is not rounded away, a small KL is not a row of zeros, counts carry
    no decimals; a column with a gap is text in that format."""
    frame = pd.DataFrame(
        {
            "reward": [0.05, -11.0],
            "kl": [0.0466123, 0.0012345],
            "tokens": [1200.0, 87.0],
            "normalized": [66.6667, 33.3333],
            "gap": [0.123456, None],
            "name": ["a", "b"],
        }
    )
    formats = {c: number_format(frame[c]) for c in frame.columns}
    assert formats == {
        "reward": "%.2f", "kl": "%.5f", "tokens": "%.0f", "normalized": "%.1f", "gap": "%.3f",
        "name": None,
    }  # fmt: skip
    config = table_config(frame, labels={"kl": "KL"}, formats={"tokens": "%d"})
    assert config["kl"]["label"] == "KL" and config["kl"]["type_config"]["format"] == "%.5f"
    assert config["tokens"]["type_config"]["format"] == "%d"
    assert "gap" not in config and "name" not in config  # text columns, as display_frame makes
    shown = display_frame(frame, {"gap": "%.3f"})
    assert list(shown["gap"]) == ["0.123", "-"] and shown["kl"].dtype == frame["kl"].dtype


def test_series_colours_stand_out_on_white_and_from_each_other() -> None:
    from dashboard.dom import MIN_CONTRAST, contrast

    assert all(contrast(colour) >= MIN_CONTRAST for colour in PALETTE), PALETTE
    assert len(set(PALETTE)) == len(PALETTE) >= 8
    # The step axis of every chart over steps: numeric, whole steps only.
    axis = step_x("step").to_dict()
    assert (axis["type"], axis["axis"]) == ("quantitative", {"format": "d", "tickMinStep": 1})
