"""The Compare page: two eval runs joined on (suite, sample id, epoch), where they disagree with
McNemar's exact test, both transcripts side by side, calls and tokens per role from each run's
usage.json, and accuracy against tokens across runs. Run directories written with
core.runstore.RunDir (dashboard.synthetic), read through Streamlit's AppTest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_apptest import chart_specs, metric, page_opener, row_where, table_with, texts

from dashboard import data, synthetic
from dashboard.views.common import PALETTE, SHAPES
from dashboard.views.compare import accuracy_tokens_chart, side_by_side

# A is wrong on gsm8k-1, 2, 3; B is wrong on gsm8k-5 and errs on gsm8k-7; gsm8k-10 is only in A.
A_WRONG = {1, 2, 3}
B_WRONG = {5}


def _usage(roles: dict[str, int], own_endpoint: dict[str, int]) -> dict[str, Any]:
    """usage.json as `mars eval` writes it: `by_role` from the default endpoint, `role:NAME` for
    a role served apart."""

    def counts(calls: int) -> dict[str, Any]:
        tokens = {"prompt_tokens": 100 * calls, "completion_tokens": 20 * calls}
        return {"calls": calls, "cached": 0, "errors": 0, "retries": 0, **tokens} | {
            "reasoning_tokens": 5 * calls,
            "latency_s": 1.0,
        }

    usage: dict[str, Any] = {"by_role": {r: counts(c) for r, c in roles.items()}}
    usage["totals"] = counts(sum(roles.values()))
    usage |= {f"role:{r}": counts(c) for r, c in own_endpoint.items()}
    return usage | {"attempts": 1}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    a = [synthetic.eval_record(i, correct=i not in A_WRONG) for i in range(11)]
    b = [synthetic.eval_record(i, correct=i not in B_WRONG) for i in range(10) if i != 7]
    b.append(synthetic.eval_record(7, correct=False, error="EndpointError: gave up"))
    run_a = synthetic.write_eval_run(root / "eval-a", a, mas="single")
    run_b = synthetic.write_eval_run(root / "eval-b", b, mas="debate")
    # A: 11 records, 22 calls of the solver and 11 of a judge on its own endpoint.
    (run_a.path / "usage.json").write_text(json.dumps(_usage({"solver": 22}, {"judge": 11})))
    (run_b.path / "usage.json").write_text(
        json.dumps(_usage({"affirmative": 20, "negative": 20}, {}))
    )
    # No usage.json: listed without tokens, not plotted.
    synthetic.write_eval_run(root / "eval-nousage", [synthetic.eval_record(0)], mas="single")
    return root


@pytest.fixture
def app(root: Path) -> Iterator[Any]:
    with page_opener(root) as open_page:
        yield open_page


@pytest.mark.parametrize(
    ("a_only", "b_only", "p"),
    [
        (1, 6, 0.125),  # 2 * (C(7,0) + C(7,1)) / 2**7 = 2 * 8 / 128
        (0, 5, 0.0625),  # 2 / 32
        (2, 8, 0.109375),  # 2 * (1 + 10 + 45) / 1024
        (1, 3, 0.625),  # 2 * (1 + 4) / 16
        (3, 3, 1.0),  # capped at 1
        (0, 0, 1.0),  # no discordant pair
    ],
)
def test_mcnemar_exact_p_against_hand_computed_values(a_only: int, b_only: int, p: float) -> None:
    assert data.mcnemar_exact_p(a_only, b_only) == pytest.approx(p, abs=1e-12)
    assert data.mcnemar_exact_p(b_only, a_only) == pytest.approx(p, abs=1e-12)


def test_the_join_lists_each_disagreement_and_leaves_errors_out(root: Path) -> None:
    frame_a = data.eval_frame(data.read_jsonl(root / "eval-a" / "records.jsonl").rows)
    frame_b = data.eval_frame(data.read_jsonl(root / "eval-b" / "records.jsonl").rows)
    pairs = data.pair_samples(frame_a, frame_b)
    by_id = pairs.set_index("sample_id")
    assert len(pairs) == 10  # gsm8k-10 is only in A
    assert sorted(pairs.loc[pairs["outcome"] == "B right, A wrong", "sample_id"]) == [
        "gsm8k-1",
        "gsm8k-2",
        "gsm8k-3",
    ]
    assert list(pairs.loc[pairs["outcome"] == "A right, B wrong", "sample_id"]) == ["gsm8k-5"]
    assert (by_id.loc["gsm8k-7", "outcome"], by_id.loc["gsm8k-7", "B"]) == ("not graded", "error")
    counts = data.paired_counts(pairs, frame_a, frame_b)
    assert (counts.a_only, counts.b_only, counts.both_right, counts.not_graded) == (1, 3, 5, 1)
    assert (counts.only_in_a, counts.only_in_b) == (1, 0)
    assert counts.p_value == pytest.approx(0.625)


def test_compare_page_disagreements_and_both_transcripts(app: Any) -> None:
    test = app("Compare", via="url", a="eval-a", b="eval-b")
    assert (test.selectbox(key="compare_a").value, test.selectbox(key="compare_b").value) == (
        "eval-a",
        "eval-b",
    )
    assert metric(test, "paired samples") == "10"
    assert metric(test, "A right, B wrong") == "1"
    assert metric(test, "B right, A wrong") == "3"
    assert metric(test, "McNemar p") == "0.625"
    assert any("1 pairs with an error in either run are left out" in c for c in texts(test.caption))

    table = table_with(test, "sample_id", "question", "A", "B")
    assert list(table["sample_id"]) == ["gsm8k-1", "gsm8k-2", "gsm8k-3", "gsm8k-5"]
    assert list(table["A"]) == ["wrong", "wrong", "wrong", "right"]
    assert row_where(table, sample_id="gsm8k-5")["question"] == "Question 5: what is 5 modulo 97?"
    test.selectbox(key="compare_show").set_value("A right, B wrong").run()
    assert list(table_with(test, "sample_id", "A", "B")["sample_id"]) == ["gsm8k-5"]

    # Both transcripts of gsm8k-5, side by side: A's right answer, B's wrong one.
    markdown = texts(test.markdown)
    assert "**A: `eval-a`**" in markdown and "**B: `eval-b`**" in markdown
    heads = [m for m in markdown if m.startswith("#### gsm8k / gsm8k-5 / epoch 0")]
    assert heads == [
        "#### gsm8k / gsm8k-5 / epoch 0 · :green[correct]",
        "#### gsm8k / gsm8k-5 / epoch 0 · :red[wrong]",
    ]
    assert any("affirmative says the answer is 6" in m for m in markdown)  # B's extracted 5 + 1


def test_two_runs_that_never_disagree_still_open_both_transcripts(tmp_path: Path) -> None:
    for name in ("eval-x", "eval-y"):  # both wrong everywhere, as the demo's tiny model is
        records = [synthetic.eval_record(i, correct=False) for i in range(3)]
        synthetic.write_eval_run(tmp_path / name, records, mas="single")
    with page_opener(tmp_path) as open_page:
        test = open_page("Compare", via="url", a="eval-x", b="eval-y")
    assert metric(test, "both wrong") == "3"
    assert test.selectbox(key="compare_show").value == "all"
    assert len(test.selectbox(key="compare_pick").options) == 3
    markdown = texts(test.markdown)
    assert "**A: `eval-x`**" in markdown and "**B: `eval-y`**" in markdown


def test_calls_and_tokens_per_role_beside_accuracy(app: Any) -> None:
    test = app("Compare", via="url", a="eval-a", b="eval-b")
    roles = table_with(test, "run", "role", "calls / question")
    # A: 11 records; the judge served on its own endpoint is a role of its own.
    solver = row_where(roles, run="eval-a", role="solver")
    assert (solver["calls"], solver["calls / question"]) == (22, 2.0)
    assert solver["tokens / question"] == pytest.approx(22 * 120 / 11)
    judge = row_where(roles, run="eval-a", role="judge")
    assert (judge["calls"], judge["prompt tokens / question"]) == (11, 100.0)
    negative = row_where(roles, run="eval-b", role="negative")
    assert negative["calls / question"] == 2.0  # 20 calls over B's 10 records

    costs = table_with(test, "run", "accuracy %", "tokens / question")
    a = row_where(costs, run="eval-a")
    assert (a["graded"], a["accuracy %"], a["calls / question"]) == (11, 72.7, 3.0)
    assert a["tokens / question"] == pytest.approx(33 * 120 / 11, abs=0.05)

    # Across runs: the run without usage.json shows "-" and is not plotted.
    across = next(e.value for e in test.dataframe if "eval-nousage" in set(e.value.get("run", [])))
    assert row_where(across, run="eval-nousage")["tokens / question"] == "-"
    assert any("without usage.json" in c for c in texts(test.caption))
    (chart,) = [s for s in chart_specs(test) if "tokens" in json.dumps(s.get("layer", ""))]
    assert chart["layer"][0]["encoding"]["x"]["title"].startswith("tokens per question")


def test_role_usage_adds_roles_served_apart() -> None:
    usage = _usage({"solver": 4}, {"judge": 2, "solver": 1})
    roles = data.role_usage(usage)
    assert roles["solver"]["calls"] == 5 and roles["judge"]["prompt_tokens"] == 200
    assert data.role_usage(None) == {} and data.role_usage({"by_role": "broken"}) == {}


def test_runs_at_the_same_point_each_keep_a_visible_mark() -> None:
    """Two runs at the same accuracy and tokens (the same MAS and model): hollow marks of their
    own shape and colour, the first largest, so neither hides the other; the pairs list A's and
    B's answers, tokens and calls side by side in one column each."""
    same = {"mas": "single", "model": "tiny", "accuracy": 0.5, "ci_low": 0.3, "ci_high": 0.7}
    table = pd.DataFrame(
        [{"run": run, **same, "tokens / question": 100.0, "calls / question": 1.0} for run in "ab"]
    )
    spec = accuracy_tokens_chart(table).to_dict()
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    assert points["mark"]["filled"] is False and points["mark"]["strokeWidth"] >= 2
    shape = points["encoding"]["shape"]
    assert shape["field"] == "run" and shape["scale"]["range"][:2] == SHAPES[:2]
    assert points["encoding"]["size"] == {"field": "size", "type": "quantitative", "scale": None,
                                          "legend": None}  # fmt: skip
    sizes = next(iter(spec["datasets"].values()))
    assert sizes[0]["size"] > sizes[1]["size"] > 0  # the second sits inside the first
    assert spec["config"]["range"]["category"] == PALETTE

    pairs = pd.DataFrame(
        {"A extracted": ["12", None], "B extracted": ["13", "7"], "A tokens": [120.0, 80.0]}
        | {"B tokens": [95.0, None], "A calls": [2, 2], "B calls": [3, 1]}
    )
    shown = side_by_side(pairs)
    assert list(shown["answers A / B"]) == ["12 / 13", "- / 7"]
    assert list(shown["tokens A / B"]) == ["120 / 95", "80 / -"]
    assert list(shown["calls A / B"]) == ["2 / 3", "2 / 1"]
