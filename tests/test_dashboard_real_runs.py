"""Every dashboard page through Streamlit's AppTest on run directories made by the real commands
(`mars eval`, `mars failures`, `mars arena`, `mars train --trainer local`; see dashboard_runs.py):
the numbers shown equal the commands' own summaries, the widgets filter and pick, a malformed line
is skipped and counted, and no run outside the root is read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR
from dashboard_apptest import (
    OpenPage,
    interval_text,
    metric,
    number,
    page_opener,
    pct,
    row_where,
    table_with,
    texts,
)
from dashboard_runs import RealRuns, read_json, read_jsonl, shared_runs

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")

PAGES = ("Runs", "Samples", "Compare", "Failure modes", "Games", "Training")
DEFAULT_CURVES = ("reward_mean", "loss", "kl", "invalid_rate")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RealRuns:
    built = shared_runs(tmp_path_factory)
    print(
        f"real runs under {built.root}: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in built.timings.items())
    )
    return built


@pytest.fixture
def app(runs: RealRuns) -> Iterator[OpenPage]:
    with page_opener(runs.root) as open_page:
        yield open_page


def _line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_from_the_sidebar_and_from_the_url(
    app: OpenPage, runs: RealRuns, page: str
) -> None:
    by_sidebar = app(page)
    by_url = app(page, via="url")
    assert texts(by_sidebar.header) == texts(by_url.header) != []
    assert len(by_sidebar.dataframe) == len(by_url.dataframe) > 0
    assert texts(by_sidebar.error) == texts(by_url.error)  # (a replayed invalid move is one)
    assert f"4 runs under `{runs.root}`" in texts(by_url.sidebar.caption)


def test_runs_page_shows_what_the_summaries_say(app: OpenPage, runs: RealRuns) -> None:
    test = app("Runs")
    table = table_with(test, "run", "kind", "status", "lines")
    assert set(table["run"]) == {"eval-base", "eval-trained", "arena-ttt", "train-ttt"}
    for path in (runs.eval_base, runs.eval_trained, runs.arena, runs.train):
        info = read_json(path / "run.json")
        row = row_where(table, run=path.name)
        assert (row["kind"], row["status"], row["attempts"]) == (
            info["kind"],
            info["status"],
            info["attempts"],
        )
        assert row["lines"] == _line_count(path / "records.jsonl")
    assert row_where(table, run="eval-base")["status"] == "completed_with_errors"  # one refusal
    assert row_where(table, run="eval-base")["mas"] == "debate"
    assert row_where(table, run="train-ttt")["model"] == "tiny-model-v1"

    accuracy = table_with(test, "suite", "run", "accuracy %", "95% CI")
    assert len(accuracy) == 4
    for path in (runs.eval_base, runs.eval_trained):
        for suite, cell in read_json(path / "summary.json")["suites"].items():
            row = row_where(accuracy, run=path.name, suite=suite)
            assert (row["n"], row["correct"], row["errors"]) == (
                cell["n"],
                cell["correct"],
                cell["errors"],
            )
            assert row["accuracy %"] == pct(cell["accuracy"])
            assert row["95% CI"] == interval_text(cell["ci95"])
            assert row["extraction_failures"] == round(cell["extraction_failure_rate"] * cell["n"])
    gsm8k = row_where(accuracy, run="eval-base", suite="gsm8k")
    assert (gsm8k["n"], gsm8k["correct"], gsm8k["errors"], gsm8k["extraction_failures"]) == (
        5,
        2,
        1,
        1,
    )
    # The line a kill cut short is skipped and counted, and changes no number.
    assert "1 malformed line skipped in eval-base/records.jsonl" in texts(test.warning)

    seats = table_with(test, "seat", "win %", "normalized_return (0-100)")
    arena = read_json(runs.arena / "summary.json")
    assert len(seats) == 2
    for seat, cell in arena["seats"].items():
        row = row_where(seats, run="arena-ttt", seat=seat)
        assert (row["game"], row["player"], row["opponent"]) == ("tic_tac_toe", "llm", "random")
        assert row["n"] == cell["n"] == 3
        assert (row["win %"], row["draw %"], row["loss %"]) == tuple(
            pct(cell[k]) for k in ("win", "draw", "loss")
        )
        assert row["normalized_return (0-100)"] == round(cell["normalized_return"], 1)
        assert row["invalid_rate %"] == pct(cell["invalid_rate"])
        assert row["mean_return"] == pytest.approx(cell["mean_return"])

    # Picking runs to compare narrows the table (and the chart) to them.
    assert set(test.multiselect(key="runs_eval").value) == {"eval-base", "eval-trained"}
    test.multiselect(key="runs_eval").set_value(["eval-trained"]).run()
    assert set(table_with(test, "suite", "accuracy %")["run"]) == {"eval-trained"}
    assert not any("eval-base/records.jsonl" in w for w in texts(test.warning))
    test.multiselect(key="runs_eval").set_value([]).run()
    assert "the chosen runs have no records yet" in texts(test.info)


def test_samples_page_filters_and_shows_a_transcript(app: OpenPage, runs: RealRuns) -> None:
    records = read_jsonl(runs.eval_base / "records.jsonl")
    summary = read_json(runs.eval_base / "summary.json")["suites"]
    test = app("Samples", run="eval-base")
    assert test.selectbox(key="samples_run").value == "eval-base"
    assert "1 malformed line skipped in eval-base/records.jsonl" in texts(test.warning)
    assert metric(test, "matching samples") == str(len(records)) == "12"
    graded = sum(cell["n"] for cell in summary.values())
    correct = sum(cell["correct"] for cell in summary.values())
    assert metric(test, "accuracy of matches") == f"{100 * correct / graded:.1f}%"
    assert metric(test, "errored") == str(sum(cell["errors"] for cell in summary.values()))

    def shown() -> set[tuple[str, str]]:
        table = table_with(test, "suite", "sample_id", "gold")
        return set(zip(table["suite"], table["sample_id"], strict=True))

    test.selectbox(key="samples_correct").set_value("wrong").run()
    assert shown() == {("gsm8k", "2"), ("gsm8k", "3"), ("gsm8k", "4"), ("aqua", "2"), ("aqua", "3")}
    assert metric(test, "accuracy of matches") == "0.0%"
    test.multiselect(key="samples_suites").set_value(["aqua"]).run()
    assert shown() == {("aqua", "2"), ("aqua", "3")}
    test.multiselect(key="samples_suites").set_value([]).run()
    test.selectbox(key="samples_extraction").set_value("only").run()
    assert shown() == {("gsm8k", "4")}
    assert metric(test, "extraction failed") == "yes" and metric(test, "extracted") == "-"
    test.selectbox(key="samples_extraction").set_value("all").run()
    test.selectbox(key="samples_correct").set_value("all").run()
    test.selectbox(key="samples_errors").set_value("only").run()
    assert shown() == {("gsm8k", "5")}
    assert any("HTTP 400" in e for e in texts(test.error))
    test.selectbox(key="samples_errors").set_value("none").run()
    assert metric(test, "matching samples") == "11"

    # Text search reaches the chains of thought; the transcript shows the agents in order.
    test.text_input(key="samples_text").set_value("thinking about AQUA question 3").run()
    assert shown() == {("aqua", "3")}
    record = next(r for r in records if (r["suite"], r["sample_id"]) == ("aqua", "3"))
    messages = record["transcript"]["messages"]
    assert metric(test, "gold") == record["gold"] == "B"
    assert metric(test, "extracted") == record["extracted"] == "A"
    table = table_with(test, "agent", "round", "prompt_tokens", "latency_s")
    assert list(table["agent"]) == [m["agent"] for m in messages]
    assert sorted(table["agent"]) == ["agent_1", "agent_1", "agent_2", "agent_2"]
    assert list(table["round"]) == [m["round"] for m in messages] and set(table["round"]) == {0, 1}
    assert list(table["prompt_tokens"]) == [m["usage"]["prompt_tokens"] for m in messages]
    assert list(table["completion_tokens"]) == [m["usage"]["completion_tokens"] for m in messages]
    assert list(table["latency_s"]) == pytest.approx([m["latency_s"] for m in messages])
    thoughts = [e.label for e in test.expander if e.label.startswith("chain of thought")]
    assert len(thoughts) == 4
    assert all("thinking about aqua question 3" in t for t in texts(test.text) if "thinking" in t)
    assert any(record["final_answer"] == c for c in texts(test.code))
    markdown = " ".join(texts(test.markdown))
    assert "MAST verdict" in markdown and "FM-2.3" in markdown and "stopped early" in markdown

    # The sample picker: several matches, pick the second.
    test.text_input(key="samples_text").set_value("").run()
    test.multiselect(key="samples_suites").set_value(["gsm8k"]).run()
    picker = test.selectbox(key="samples_pick")
    assert len(picker.options) == 5
    picker.set_value(_row_of(test, records, "gsm8k", "3")).run()
    assert metric(test, "gold") == "540" and metric(test, "extracted") == "541"
    assert "FM-1.3" in " ".join(texts(test.markdown))


def _row_of(test: Any, records: list[dict[str, Any]], suite: str, sample_id: str) -> int:
    """The picker's value for a sample: its position among the file's well-formed records."""
    return next(
        i for i, r in enumerate(records) if (r["suite"], r["sample_id"]) == (suite, sample_id)
    )


def test_failure_modes_page_shows_the_summaries_and_the_transcripts(
    app: OpenPage, runs: RealRuns
) -> None:
    base = read_json(runs.eval_base / "failures_summary.json")
    trained = read_json(runs.eval_trained / "failures_summary.json")
    test = app("Failure modes")
    # By default the two latest analysed runs, older first: B minus A is "after minus before".
    assert test.multiselect(key="failures_runs").value == ["eval-base", "eval-trained"]
    assert "1 malformed line skipped in eval-base/failures.jsonl" in texts(test.warning)
    assert f"eval-base: {base['parse_failures']} judge replies did not parse" in " ".join(
        texts(test.caption)
    )
    categories = table_with(test, "name", "eval-base %", "eval-trained %")
    modes = table_with(test, "name", "eval-base %", "eval-trained 95% CI")
    modes = (
        modes
        if len(modes) == 14
        else next(e.value for e in test.dataframe if "FM-2.5" in e.value.index)
    )
    assert len(modes) == 14
    for name, summary in (("eval-base", base), ("eval-trained", trained)):
        for cell in summary["categories"].values():
            row = categories.loc[cell["id"]]
            assert row[f"{name} %"] == pct(cell["rate"])
            assert row[f"{name} 95% CI"] == interval_text(cell["ci95"])
            assert row[f"{name} n"] == cell["n"] == summary["n_judged"]
        assert categories.loc["any"][f"{name} %"] == pct(summary["any_failure"]["rate"])
        for mode_id, cell in summary["modes"].items():
            assert modes.loc[mode_id][f"{name} %"] == pct(cell["rate"])
            assert modes.loc[mode_id][f"{name} 95% CI"] == interval_text(cell["ci95"])
    # What the scripted judge said (one reply not JSON): mars failures parsed and counted it.
    assert (base["n_selected"], base["n_judged"], base["parse_failures"]) == (5, 4, 1)
    assert base["categories"]["misalignment"]["rate"] == 0.5
    assert base["modes"]["FM-2.5"]["count"] == base["modes"]["FM-1.3"]["count"] == 1

    compare = table_with(test, "category", "A %", "B %", "B - A (points)")
    for cell_a in base["categories"].values():
        cell_b = trained["categories"][
            next(k for k, v in trained["categories"].items() if v["id"] == cell_a["id"])
        ]
        row = row_where(compare, category=cell_a["name"])
        assert (row["A %"], row["B %"]) == (pct(cell_a["rate"]), pct(cell_b["rate"]))
        assert row["B - A (points)"] == round(100 * (cell_b["rate"] - cell_a["rate"]), 1)

    # Behind a bar: the transcripts that show it, with the judge's quote.
    test.selectbox(key="failures_run").set_value("eval-base").run()
    test.selectbox(key="failures_target").set_value("FM-2.5").run()
    shown = [e.label for e in test.expander if e.label.startswith(("gsm8k / ", "aqua / "))]
    assert shown == ['gsm8k / 2 / epoch 0 · "ignored agent_2"']
    assert "1 transcripts of eval-base show FM-2.5" in " ".join(texts(test.caption))
    test.selectbox(key="failures_target").set_value("verification").run()
    shown = [e.label for e in test.expander if e.label.startswith(("gsm8k / ", "aqua / "))]
    assert sorted(label.split(" · ")[0] for label in shown) == [
        "aqua / 3 / epoch 0",
        "gsm8k / 2 / epoch 0",
    ]
    count = base["categories"]["verification"]["count"]
    assert f"{count} transcripts of eval-base show FC3" in " ".join(texts(test.caption))

    # One run picked: no comparison.
    test.multiselect(key="failures_runs").set_value(["eval-trained"]).run()
    assert not any("B - A (points)" in e.value.columns for e in test.dataframe)


def test_games_page_outcomes_and_replay_of_the_invalid_move(app: OpenPage, runs: RealRuns) -> None:
    summary = read_json(runs.arena / "summary.json")
    records = read_jsonl(runs.arena / "records.jsonl")
    test = app("Games", run="arena-ttt")
    assert "1 malformed line skipped in arena-ttt/records.jsonl" in texts(test.warning)
    outcomes = table_with(test, "seat", "win %", "win 95% CI")
    normalized = table_with(test, "normalized_return", "mean_return")
    for seat, cell in summary["seats"].items():
        row = row_where(outcomes, seat=seat)
        assert (row["game"], row["opponent"], row["n"]) == ("tic_tac_toe", "random", cell["n"])
        assert (row["win %"], row["draw %"], row["loss %"]) == tuple(
            pct(cell[k]) for k in ("win", "draw", "loss")
        )
        assert row["win 95% CI"] == interval_text(cell["win_ci"])
        assert row["mean_return"] == pytest.approx(cell["mean_return"])
        assert row["invalid_rate %"] == pct(cell["invalid_rate"])
        assert row_where(normalized, seat=seat)["normalized_return"] == pytest.approx(
            cell["normalized_return"]
        )

    # Replay the episode the scripted model lost by an illegal move.
    position, bad = next((i, r) for i, r in enumerate(records) if r["invalid"])
    seat = bad["seat"]
    test.selectbox(key="games_seat").set_value(seat).run()
    test.selectbox(key="games_outcome").set_value("loss").run()
    test.selectbox(key="games_ep").set_value(position).run()
    assert any("ended by an invalid move of seat" in w for w in texts(test.warning))
    result = table_with(test, "who", "outcome", "return")
    assert list(result["who"]) == bad["players"] and list(result["outcome"]) == bad["outcomes"]
    turns = table_with(test, "seat", "action", "legal", "reward")
    assert list(turns["action"]) == [t["action"] or "-" for t in bad["turns"]]
    assert list(turns["reward"]) == pytest.approx([t["reward"] for t in bad["turns"]])
    last = len(bad["turns"]) - 1
    if last:
        test.slider(key="games_turn").set_value(last).run()
    assert metric(test, "legal") == "False"
    assert "<X(9,9)>" in " ".join(texts(test.code))  # the reply
    assert bad["turns"][last]["prompt"][-1]["content"] in texts(test.code)  # the state it saw
    assert any("is not one of the legal actions" in e for e in texts(test.error))
    assert any(e.label.startswith("reasoning") for e in test.expander)
    if last:  # the move before was the random bot's
        test.slider(key="games_turn").set_value(last - 1).run()
        assert metric(test, "action") == bad["turns"][last - 1]["action"]


def test_training_page_curves_equal_the_training_summary(app: OpenPage, runs: RealRuns) -> None:
    summary = read_json(runs.train / "summary.json")
    last = summary["last_metrics"]
    test = app("Training")
    assert "1 malformed line skipped in train-ttt/metrics.jsonl" in texts(test.warning)
    assert test.multiselect(key="train_runs").value == ["train-ttt"]
    latest = row_where(table_with(test, "run", "steps", "last step"), run="train-ttt")
    rows = read_jsonl(runs.train / "metrics.jsonl")
    # Step 0 (the start, evaluated before any update) and the 2 steps: a row each.
    assert [row["step"] for row in rows] == [0, 1, 2] and summary["steps"] == 2
    assert latest["steps"] == summary["steps"]  # the updates: not the step-0 evaluation
    assert latest["last step"] == summary["last_step"]
    for name in DEFAULT_CURVES:
        assert latest[name] == pytest.approx(last[name])
    specs = [chart.proto.spec for chart in test.get("vega_lite_chart")]
    # The four default metrics, exploitability, the win rates, the policy against equilibrium.
    assert len(specs) == 7
    assert '"exploitability"' in specs[4] and "win rate" in specs[5]
    assert '"rect"' in specs[6] and "kuhn_poker" in specs[6]  # the heatmap
    assert all(f'"{name}"' in spec for name, spec in zip(DEFAULT_CURVES, specs, strict=False))

    # The policy panel has a start column: step 0's evaluation, then each step's.
    grid = table_with(test, "player", "history", "card", "Nash low")
    assert {"0", "1", "2"} <= set(grid.columns)

    wins = table_with(test, "game", "opponent", "seat", "win", "ci_low")
    assert len(wins) == 2
    for seat in ("first", "second"):
        row = row_where(wins, seat=seat)
        prefix = f"eval/tic_tac_toe/random/{seat}"
        assert (row["game"], row["opponent"], row["step"]) == ("tic_tac_toe", "random", 2)
        assert row["win"] == pytest.approx(last[f"{prefix}/win"])
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(
            (last[f"{prefix}/ci95_low"], last[f"{prefix}/ci95_high"])
        )

    test.multiselect(key="train_metrics").set_value(["lr", "tokens_per_s"]).run()
    latest = row_where(table_with(test, "run", "steps", "last step"), run="train-ttt")
    assert "loss" not in latest.index
    assert latest["lr"] == pytest.approx(last["lr"])
    assert any("mars loop --watch" in i for i in texts(test.info))  # no loop run here yet


def test_compare_page_pairs_the_two_evals_and_reads_their_usage(
    app: OpenPage, runs: RealRuns
) -> None:
    test = app("Compare", via="url", a="eval-base", b="eval-trained")
    # By the scripted plans: gsm8k 2, 3 and aqua 2 are wrong in base and right when trained;
    # gsm8k 4 is wrong in both; base's gsm8k 5 was refused (not graded).
    assert (metric(test, "A right, B wrong"), metric(test, "B right, A wrong")) == ("0", "3")
    assert metric(test, "both wrong") == "2"  # gsm8k 4, aqua 3
    assert metric(test, "McNemar p") == "0.25"  # 2 * 1/2**3
    table = table_with(test, "sample_id", "A", "B")
    samples = runs.samples
    expected = {samples["gsm8k"][2].id, samples["gsm8k"][3].id, samples["aqua"][2].id}
    assert set(table["sample_id"]) == expected and set(table["B"]) == {"right"}

    records = len(read_jsonl(runs.eval_base / "records.jsonl"))
    usage = read_json(runs.eval_base / "usage.json")
    roles = table_with(test, "run", "role", "calls / question")
    assert set(roles.loc[roles["run"] == "eval-base", "role"]) == set(usage["by_role"])
    for role, counts in usage["by_role"].items():
        row = row_where(roles, run="eval-base", role=role)
        assert row["calls"] == counts["calls"]
        per_question = counts["calls"] / records
        assert number(row["calls / question"]) == pytest.approx(per_question, abs=0.005)


def test_the_inspector_links_a_real_runs_group_to_its_replay(app: OpenPage, runs: RealRuns) -> None:
    from urllib.parse import parse_qs, urlparse

    from core import branch_log

    page = app("Inspector", via="url", run="train-ttt")
    assert metric(page, "forced (left out)") == "0"  # no all-actions: nothing forced
    step = page.select_slider(key="inspector_step").value
    state = page.selectbox(key="inspector_state").value
    lines = branch_log.read_step(runs.train, step)
    group = next(g for g in branch_log.groups_of(lines).values() if g[0]["state"] == state)
    chosen = next(branch for branch in group if branch["chosen"])
    link = next(t for t in texts(page.markdown) if t.startswith("[replay episode"))
    query = {k: v[0] for k, v in parse_qs(urlparse(link.split("](")[1][:-1]).query).items()}
    assert query["page"] == "games" and query["run"] == "train-ttt"
    assert (query["step"], query["seed"]) == (str(step), str(chosen["episode"]))
    query.pop("page")
    games = app("Games", via="url", **query)
    assert games.selectbox(key="games_step").value == step
    # The replay opens at the group's turn: the main line went on with the chosen reply.
    assert chosen["reply"] in texts(games.code)


@pytest.mark.parametrize("page", ["Samples", "Games"])
def test_a_run_outside_the_root_is_refused(
    app: OpenPage, runs: RealRuns, tmp_path: Path, page: str
) -> None:
    key = {"Samples": "samples_run", "Games": "games_run"}[page]
    outside = tmp_path / "outside-copy"
    shutil.copytree(runs.eval_base, outside)
    for requested in (str(outside), "../outside-copy", "eval-base/../../x", "/etc"):
        test = app(page, run=requested)
        errors = texts(test.error)
        assert any("refused" in e and "outside the runs root" in e for e in errors), errors
        # Nothing of the outside run shows: the page falls back to a run under the root.
        under_root = {"eval-base", "eval-trained", "arena-ttt", "train-ttt"}
        assert test.selectbox(key=key).value in under_root

    # A run reached through a symlink that leaves the root is neither listed nor opened.
    root = tmp_path / "root"
    shutil.copytree(runs.arena, root / "arena-ttt")
    (root / "leak").symlink_to(outside, target_is_directory=True)
    test = app("Samples", runs_root=root, run="leak")
    assert any("no eval runs yet" in i for i in texts(test.info))
    runs_page = app("Runs", runs_root=root)
    assert list(table_with(runs_page, "run", "kind")["run"]) == ["arena-ttt"]


def test_damaged_files_are_counted_never_a_crash(
    app: OpenPage, runs: RealRuns, tmp_path: Path
) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(runs.root, root, ignore=shutil.ignore_patterns("checkpoints"))
    with (root / "eval-trained" / "records.jsonl").open("ab") as handle:
        handle.write(b'\xff\xfe not utf-8\n[1, 2, 3]\n"a string"\n')
    with (root / "eval-trained" / "failures.jsonl").open("a") as handle:
        handle.write('{"suite": "gsm8k", "sample_id": 4, "modes": "FM-2.5", "parsed": true}\n')
    (root / "arena-ttt" / "summary.json").write_text("[1, 2]")
    with (root / "arena-ttt" / "records.jsonl").open("a") as handle:
        handle.write('{"seat": "first", "turns": ["junk", {"seat": "x"}], "outcomes": 3}\n')
    with (root / "train-ttt" / "metrics.jsonl").open("a") as handle:
        handle.write('null\n{"step": "late", "loss": "high"}\n')

    for page in PAGES:
        test = app(page, runs_root=root)  # asserts no exception
        assert test.header
    samples = app("Samples", runs_root=root, run="eval-trained")
    assert "3 malformed lines skipped in eval-trained/records.jsonl" in texts(samples.warning)
    assert metric(samples, "matching samples") == "12"
    games = app("Games", runs_root=root, run="arena-ttt")
    assert "1 malformed line skipped in arena-ttt/records.jsonl" in texts(games.warning)
    assert not any(e.value.columns.tolist() == ["normalized_return"] for e in games.dataframe)
    training = app("Training", runs_root=root)
    assert "2 malformed lines skipped in train-ttt/metrics.jsonl" in texts(training.warning)


def test_an_appended_record_shows_on_the_next_run(
    app: OpenPage, runs: RealRuns, tmp_path: Path
) -> None:
    root = tmp_path / "growing"
    shutil.copytree(runs.eval_trained, root / "eval-trained")
    test = app("Samples", runs_root=root)
    assert metric(test, "matching samples") == "12"
    record = read_jsonl(root / "eval-trained" / "records.jsonl")[0]
    record = {**record, "sample_id": "extra", "correct": False}
    with (root / "eval-trained" / "records.jsonl").open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    test.run()
    assert metric(test, "matching samples") == "13"
