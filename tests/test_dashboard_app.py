"""Every dashboard page through Streamlit's AppTest, on a temp runs root of synthetic run dirs
written with core.runstore.RunDir: exact numbers on hand-made cases, formats the commands do
not write yet (loop curves, older metric layouts), and empty states. The same pages on run dirs
made by the real commands: test_dashboard_real_runs.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_apptest import ci_text as _ci
from dashboard_apptest import metric, page_opener, row_where, table_with, texts

from dashboard import synthetic


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    # eval-base: gsm8k 0..19 wrong when i % 4 == 0, #20 extraction failed, #21 errored;
    # math500 0..7 wrong only for #3; two lines cut short.
    base_records = [synthetic.eval_record(i, correct=i % 4 != 0) for i in range(20)]
    base_records.append(synthetic.eval_record(20, correct=False, extraction_failed=True))
    base_records.append(synthetic.eval_record(21, correct=False, error="EndpointError: gave up"))
    base_records += [synthetic.eval_record(i, suite="math500", correct=i != 3) for i in range(8)]
    base = synthetic.write_eval_run(
        root / "eval-base", base_records, model="/models/Qwen3-4B", malformed_lines=2
    )
    trained_records = [synthetic.eval_record(i, correct=i % 10 != 0) for i in range(20)]
    trained = synthetic.write_eval_run(root / "eval-trained", trained_records, model="marshal")
    by_id = {r["sample_id"]: r for r in base_records}
    synthetic.write_failures(
        base,
        [
            synthetic.verdict(by_id["gsm8k-0"], ["FM-2.5", "FM-3.2"]),
            synthetic.verdict(by_id["gsm8k-4"], ["FM-2.5"]),
            synthetic.verdict(by_id["gsm8k-8"], ["FM-1.3"]),
            synthetic.verdict(by_id["gsm8k-12"], []),
            synthetic.verdict(by_id["gsm8k-16"], ["FM-2.3"]),
            synthetic.verdict(by_id["gsm8k-20"], [], parsed=False),
        ],
        malformed_lines=1,
    )
    synthetic.write_failures(
        trained,
        [
            synthetic.verdict(trained_records[0], ["FM-2.5"]),
            synthetic.verdict(trained_records[10], []),
        ],
    )
    first = ["win", "win", "win", "loss"]
    second = ["draw", "draw", "loss", "win"]
    arena_records = [synthetic.arena_record(s, "first", outcome=o) for s, o in enumerate(first)]
    arena_records += [synthetic.arena_record(s, "second", outcome=o) for s, o in enumerate(second)]
    seat_summary = {
        "first": {"n": 4, "win": 0.75, "draw": 0.0, "loss": 0.25, "mean_return": 0.5},
        "second": {"n": 4, "win": 0.25, "draw": 0.5, "loss": 0.25, "mean_return": 0.0},
    }
    seat_summary["first"].update(normalized_return=75.0, invalid_rate=0.0)
    seat_summary["second"].update(normalized_return=50.0, invalid_rate=0.1)
    synthetic.write_arena_run(
        root / "arena-ttt",
        arena_records,
        summary={
            "game": "tic_tac_toe",
            "player": "model",
            "opponent": "mcts:100",
            "seats": seat_summary,
        },
    )
    synthetic.write_train_run(root / "train-a", 5, malformed_lines=1)
    synthetic.write_train_run(root / "train-b", 3, loss_start=2.0)
    synthetic.write_loop_run(
        root / "loop-a",
        [{"step": 0, "gsm8k": 0.5, "tic_tac_toe/first": 0.2}, {"step": 10, "gsm8k": 0.6}],
    )
    return root


@pytest.fixture
def app(root: Path) -> Iterator[Any]:
    with page_opener(root) as open_page:
        yield open_page


def test_runs_page_lists_runs_and_accuracy_with_cis(app: Any) -> None:
    test = app("Runs")
    runs = table_with(test, "run", "kind", "status")
    assert set(runs["run"]) == {
        "eval-base",
        "eval-trained",
        "arena-ttt",
        "train-a",
        "train-b",
        "loop-a",
    }
    assert row_where(runs, run="eval-base")["model"] == "Qwen3-4B"
    assert row_where(runs, run="eval-base")["lines"] == 30 + 2

    accuracy = table_with(test, "suite", "accuracy %", "95% CI")
    base = row_where(accuracy, suite="gsm8k", run="eval-base")
    # 21 graded (the errored one apart): 15 correct; the extraction failure counts as wrong.
    assert (base["n"], base["correct"], base["errors"], base["extraction_failures"]) == (
        21,
        15,
        1,
        1,
    )
    assert base["accuracy %"] == round(100 * 15 / 21, 1)
    assert base["95% CI"] == _ci(15, 21)
    assert (base["mas"], base["model"]) == ("mad", "Qwen3-4B")
    math = row_where(accuracy, suite="math500", run="eval-base")
    assert (math["n"], math["accuracy %"], math["95% CI"]) == (8, 87.5, _ci(7, 8))
    trained = row_where(accuracy, suite="gsm8k", run="eval-trained")
    assert (trained["n"], trained["accuracy %"], trained["model"]) == (20, 90.0, "marshal")
    assert "2 malformed lines skipped in eval-base/records.jsonl" in texts(test.warning)

    seats = table_with(test, "seat", "win %", "normalized_return (0-100)")
    first = row_where(seats, seat="first")
    assert (first["n"], first["win %"], first["normalized_return (0-100)"]) == (4, 75.0, 75.0)
    second = row_where(seats, seat="second")
    assert (second["draw %"], second["invalid_rate %"]) == (50.0, 10.0)

    # Comparing only one run drops the other's rows.
    test.multiselect(key="runs_eval").set_value(["eval-trained"]).run()
    assert set(table_with(test, "suite", "accuracy %")["run"]) == {"eval-trained"}


def test_samples_page_filters_and_shows_a_transcript(app: Any) -> None:
    test = app("Samples", run="eval-base")
    assert test.selectbox(key="samples_run").value == "eval-base"
    assert metric(test, "matching samples") == "30"
    assert "2 malformed lines skipped in eval-base/records.jsonl" in texts(test.warning)

    test.selectbox(key="samples_correct").set_value("wrong").run()
    # gsm8k 0, 4, 8, 12, 16 and the extraction failure 20; math500 3.
    assert metric(test, "matching samples") == "7"
    test.multiselect(key="samples_suites").set_value(["gsm8k"]).run()
    table = table_with(test, "sample_id", "correct", "gold")
    assert sorted(table["sample_id"]) == sorted(f"gsm8k-{i}" for i in (0, 4, 8, 12, 16, 20))
    test.selectbox(key="samples_extraction").set_value("only").run()
    assert list(table_with(test, "sample_id", "gold")["sample_id"]) == ["gsm8k-20"]

    test.selectbox(key="samples_extraction").set_value("all").run()
    test.selectbox(key="samples_correct").set_value("all").run()
    test.selectbox(key="samples_errors").set_value("only").run()
    assert list(table_with(test, "sample_id", "gold")["sample_id"]) == ["gsm8k-21"]
    test.selectbox(key="samples_errors").set_value("all").run()
    test.text_input(key="samples_text").set_value("<negative thinks about sample 13>").run()
    assert list(table_with(test, "sample_id", "gold")["sample_id"]) == ["gsm8k-13"]

    # The transcript: each agent in order, tokens and latency, reasoning apart, gold vs answer.
    test.text_input(key="samples_text").set_value("question 4:").run()
    assert metric(test, "gold") == "4" and metric(test, "extracted") == "5"
    messages = table_with(test, "agent", "prompt_tokens", "latency_s")
    assert list(messages["agent"]) == ["affirmative", "negative", "moderator"]
    assert list(messages["prompt_tokens"]) == [100, 101, 102]
    assert list(messages["latency_s"]) == pytest.approx([0.5, 0.6, 0.7])
    thoughts = [e.label for e in test.expander if e.label.startswith("chain of thought")]
    assert len(thoughts) == 3
    markdown = " ".join(texts(test.markdown))
    assert "affirmative says the answer is 5" in markdown
    assert "FM-2.5" in markdown  # the MAST verdict of this sample
    assert any("\\boxed{5}" in c for c in texts(test.code))


def test_failure_modes_page_rates_comparison_and_transcripts(app: Any) -> None:
    test = app("Failure modes")
    test.multiselect(key="failures_runs").set_value(["eval-trained", "eval-base"]).run()
    categories = table_with(test, "name", "eval-base %", "eval-trained %")
    misalignment = categories.loc["FC2"]
    # eval-base: 5 parsed verdicts, misalignment in 0, 4, 16; eval-trained: 1 of 2.
    assert misalignment["eval-base %"] == 60.0 and misalignment["eval-base 95% CI"] == _ci(3, 5)
    assert misalignment["eval-trained %"] == 50.0 and misalignment["eval-trained n"] == 2
    assert categories.loc["FC1"]["eval-base %"] == 20.0
    assert categories.loc["any"]["eval-base %"] == 80.0
    modes = next(e.value for e in test.dataframe if "FM-2.5" in e.value.index)
    assert len(modes) == 14 and modes.loc["FM-2.5"]["eval-base %"] == 40.0
    assert "1 malformed line skipped in eval-base/failures.jsonl" in texts(test.warning)
    assert any("1 judge replies did not parse" in c for c in texts(test.caption))

    compare = table_with(test, "category", "B - A (points)", "95% CI")
    row = row_where(compare, category="Inter-agent misalignment")
    assert (row["A %"], row["B %"], row["B - A (points)"]) == (50.0, 60.0, 10.0)

    test.selectbox(key="failures_target").set_value("FM-2.5").run()
    test.selectbox(key="failures_run").set_value("eval-base").run()
    labels = [e.label for e in test.expander if e.label.startswith("gsm8k / ")]
    assert len(labels) == 2
    assert labels[0].startswith("gsm8k / gsm8k-0 / epoch 0") and "quote for FM-2.5" in labels[0]
    assert labels[1].startswith("gsm8k / gsm8k-4 / epoch 0")
    test.selectbox(key="failures_target").set_value("verification").run()
    assert len([e for e in test.expander if e.label.startswith("gsm8k / ")]) == 1


def test_games_page_outcomes_and_replay(app: Any) -> None:
    test = app("Games")
    outcomes = table_with(test, "seat", "win %", "win 95% CI")
    first = row_where(outcomes, seat="first")
    assert (first["n"], first["win %"], first["loss %"]) == (4, 75.0, 25.0)
    assert first["win 95% CI"] == _ci(3, 4) and first["opponent"] == "mcts:100"
    second = row_where(outcomes, seat="second")
    assert (second["win %"], second["draw %"]) == (25.0, 50.0)
    normalized = table_with(test, "normalized_return")
    assert row_where(normalized, seat="second")["normalized_return"] == 50.0

    test.selectbox(key="games_seat").set_value("first").run()
    test.selectbox(key="games_outcome").set_value("loss").run()
    result = table_with(test, "who", "outcome", "return")
    assert list(result["outcome"]) == ["loss", "win"] and list(result["who"]) == [
        "model",
        "mcts:100",
    ]
    turns = table_with(test, "seat", "action", "legal", "reward")
    assert list(turns["action"]) == ["<X(0,0)>", "<O(1,0)>", "<X(2,2)>"]
    assert list(turns["seat"]) == [
        "first (model) [player]",
        "second (mcts:100)",
        "first (model) [player]",
    ]
    assert metric(test, "action") == "<X(0,0)>"
    assert "board at step 0 (seed 3)" in texts(test.code)
    assert any(e.label.startswith("reasoning") for e in test.expander)
    test.slider(key="games_turn").set_value(1).run()
    assert metric(test, "action") == "<O(1,0)>"
    assert any("bot's move" in c for c in texts(test.caption))


def test_training_page_curves_and_learning_curve(app: Any) -> None:
    test = app("Training")
    latest = table_with(test, "run", "steps", "last step")
    a = row_where(latest, run="train-a")
    assert (a["steps"], a["last step"]) == (5, 4)
    assert a["loss"] == pytest.approx(1 / 5) and a["reward_mean"] == pytest.approx(0.4)
    b = row_where(latest, run="train-b")
    assert (b["steps"], b["loss"]) == (3, pytest.approx(2 / 3))
    assert "1 malformed line skipped in train-a/metrics.jsonl" in texts(test.warning)
    wins = table_with(test, "opponent", "seat", "win", "ci_low")
    win_a = row_where(wins, run="train-a")
    assert (win_a["opponent"], win_a["seat"], win_a["step"]) == ("mcts:100", "first", 4)
    assert (win_a["win"], win_a["ci_low"], win_a["ci_high"]) == pytest.approx((0.4, 0.35, 0.45))
    # The loop's learning curve on its side: a row per figure, a column per checkpoint.
    curve = table_with(test, "figure")
    gsm8k = row_where(curve, figure="gsm8k")
    assert list(gsm8k.index[1:]) == ["step 0", "step 10"]
    assert list(gsm8k.iloc[1:]) == ["0.5", "0.6"]

    test.multiselect(key="train_metrics").set_value(["kl"]).run()
    latest = table_with(test, "run", "steps", "last step")
    assert "loss" not in latest.columns
    assert row_where(latest, run="train-b")["kl"] == pytest.approx(0.02)


def test_a_run_outside_the_root_is_refused(app: Any, root: Path, tmp_path: Path) -> None:
    for outside in ("../elsewhere", "/etc", "eval-base/../../x"):
        test = app("Samples", run=outside)
        assert any("refused" in e and "outside the runs root" in e for e in texts(test.error))
        # Nothing leaked: the default (first) run is shown instead.
        assert test.selectbox(key="samples_run").value in {"eval-base", "eval-trained"}

    # A run reached through a symlink that leaves the root is not listed at all.
    sneaky_root = tmp_path / "root"
    sneaky_root.mkdir()
    outside = synthetic.write_eval_run(tmp_path / "secret", [synthetic.eval_record(0)])
    (sneaky_root / "linked").symlink_to(outside.path, target_is_directory=True)
    test = app("Runs", runs_root=sneaky_root)
    assert any("no runs under" in i for i in texts(test.info))


@pytest.mark.parametrize(
    ("page", "hint"),
    [
        ("Runs", "mars eval --suite gsm8k --limit 5"),
        ("Samples", "no eval runs yet: run `mars eval --suite gsm8k --limit 5`"),
        ("Compare", "no eval runs yet: run `mars eval --suite gsm8k --limit 5`"),
        ("Failure modes", "no failure analysis yet: run `mars failures"),
        ("Games", "no arena runs yet: run `mars arena"),
        ("Training", "no training runs yet: run `mars train"),
    ],
)
def test_empty_root_says_which_command_fills_each_page(
    app: Any, tmp_path: Path, page: str, hint: str
) -> None:
    test = app(page, runs_root=tmp_path / "empty")
    assert any(hint in i for i in texts(test.info)), texts(test.info)
    assert not test.dataframe
