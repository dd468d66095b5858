"""The dashboard's MAS training view (Training page, `dashboard/mas_data.py`,
`dashboard/views/mas_training.py`) on a run made by the real workflow trainer (`mars train-mas`'s
`train_workflow`: reasoner_tool, one policy per role, 2 steps), beside a game training run: the
curves equal metrics.jsonl, each message carries the reward of its role's call from
records.jsonl, and the page renders it all through Streamlit's AppTest."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from dashboard_apptest import (
    OpenPage,
    metric,
    number,
    page_opener,
    row_where,
    table_with,
    texts,
)
from streamlit.testing.v1 import AppTest
from workflow_testkit import tiny_workflow_config, train_tiny_workflow

from core.runstore import RunDir
from dashboard import data, mas_data, synthetic

MAS_RUN = "mas-per-role"
GAME_RUN = "train-game"
ROLES = {"tool": "coder", "reasoner": "thinker"}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dashboard-mas") / "runs"
    train_tiny_workflow(root / MAS_RUN, tiny_workflow_config(policies=ROLES, save_every=1))
    synthetic.write_train_run(root / GAME_RUN, 3)
    return root


@pytest.fixture(scope="module")
def metrics_rows(root: Path) -> list[dict[str, Any]]:
    return _jsonl(root / MAS_RUN / "metrics.jsonl")


@pytest.fixture(scope="module")
def records(root: Path) -> list[dict[str, Any]]:
    return _jsonl(root / MAS_RUN / "records.jsonl")


@pytest.fixture(scope="module")
def frame(root: Path) -> pd.DataFrame:
    return data.metrics_frame(data.read_jsonl(root / MAS_RUN / "metrics.jsonl").rows)


@pytest.fixture
def app(root: Path) -> Iterator[OpenPage]:
    with page_opener(root) as open_page:
        yield open_page


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """The test's own reading of a JSONL file, independent of the dashboard's."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected_message_rewards(record: dict[str, Any]) -> list[tuple[str, float | None]]:
    """(agent, reward) per message: the k-th message of a role gets rewards["<role>/<k>"]."""
    seen: dict[str, int] = defaultdict(int)
    expected = []
    for message in record["transcript"]["messages"]:
        agent = message["agent"]
        expected.append((agent, record["rewards"].get(f"{agent}/{seen[agent]}")))
        seen[agent] += 1
    return expected


# ---------------------------------------------------------------- data functions


def test_only_runs_that_name_a_workflow_are_mas_training_runs(root: Path) -> None:
    runs = data.scan_runs(root).entries
    assert {run.name for run in runs} == {MAS_RUN, GAME_RUN}
    assert [run.name for run in mas_data.mas_training_runs(runs)] == [MAS_RUN]


def test_role_return_curves_equal_the_metrics_file(
    frame: pd.DataFrame, metrics_rows: list[dict[str, Any]]
) -> None:
    curves = mas_data.role_return_curves(frame)
    assert set(curves["role"]) == set(ROLES)
    expected = {
        (row["step"], role): row[f"return_mean/{role}"] for row in metrics_rows for role in ROLES
    }
    shown = {(row.step, row.role): row.return_mean for row in curves.itertuples()}
    assert shown == pytest.approx(expected)
    assert len(curves) == 2 * len(ROLES)


def test_policy_update_curves_equal_the_metrics_file(
    frame: pd.DataFrame, metrics_rows: list[dict[str, Any]]
) -> None:
    assert sorted(mas_data.policy_names(frame)) == sorted(ROLES.values())
    curves = mas_data.policy_update_curves(frame)
    expected = {
        (row["step"], policy, stat): row[f"policy/{policy}/{stat}"]
        for row in metrics_rows
        for policy in ROLES.values()
        for stat in ("loss", "kl", "grad_norm")
    }
    shown = {(r.step, r.policy, r.stat): r.value for r in curves.itertuples()}
    assert shown == pytest.approx(expected)
    # A game run's action shares (`policy/<game>/<state>/<action>`) are no policy's update.
    game = data.metrics_frame([{"step": 1, "policy/kuhn_poker/J -/BET": 0.3}])
    assert mas_data.policy_names(game) == [] and mas_data.policy_update_curves(game).empty


def test_accuracy_curves_hold_train_and_heldout_accuracy_with_its_interval(
    frame: pd.DataFrame, metrics_rows: list[dict[str, Any]]
) -> None:
    curves = mas_data.accuracy_curves(frame)
    train = curves[curves["series"] == mas_data.TRAIN_SERIES]
    assert list(train["step"]) == [row["step"] for row in metrics_rows]
    assert list(train["accuracy"]) == pytest.approx([row["train_accuracy"] for row in metrics_rows])
    (heldout,) = curves[curves["series"] == mas_data.HELDOUT_SERIES].itertuples()
    last = metrics_rows[-1]
    assert heldout.step == 2 and "eval/accuracy" not in metrics_rows[0]
    assert (heldout.accuracy, heldout.ci_low, heldout.ci_high) == pytest.approx(
        (last["eval/accuracy"], last["eval/accuracy_ci95_low"], last["eval/accuracy_ci95_high"])
    )
    # The interval written as a pair is read too.
    pair = data.metrics_frame([{"step": 4, "eval/accuracy": 0.5, "eval/ci95": [0.25, 0.75]}])
    (row,) = mas_data.accuracy_curves(pair).itertuples()
    assert (row.series, row.ci_low, row.ci_high) == (mas_data.HELDOUT_SERIES, 0.25, 0.75)


def test_each_message_carries_the_reward_of_its_roles_call(records: list[dict[str, Any]]) -> None:
    assert len(records) == 2 * 2  # 2 problems a step, 2 steps
    table = mas_data.workflow_table(records)
    assert list(table["step"]) == [record["step"] for record in records]
    assert list(table["problem_id"]) == [record["problem_id"] for record in records]
    assert list(table["correct"]) == [record["correct"] for record in records]
    for record in records:
        messages = mas_data.workflow_messages(record)
        assert [m.agent for m in messages] == ["tool", "reasoner"]  # one round
        assert [(m.agent, m.reward) for m in messages] == _expected_message_rewards(record)
        assert [m.text for m in messages] == [
            message["text"] for message in record["transcript"]["messages"]
        ]
        assert mas_data.unmatched_rewards(record, messages) == {}
        rounds = mas_data.workflow_rounds(record)
        assert list(rounds["execution"]) == [
            item["execution"] for item in record["transcript"]["extra"]["rounds"]
        ]


def test_the_kth_message_of_a_role_gets_that_roles_kth_reward(
    records: list[dict[str, Any]],
) -> None:
    """A second round (the real run has one): each role's second call gets `<role>/1`, and a
    reward no message earned is kept apart."""
    record = json.loads(json.dumps(records[0]))
    first_round = record["transcript"]["messages"]
    record["transcript"]["messages"] = first_round + [
        {**message, "round": 1, "text": f"again: {message['text']}"} for message in first_round
    ]
    record["rewards"] = {"tool/0": -1.0, "reasoner/0": 0.0, "tool/1": 1.5, "reasoner/1": 2.0}
    record["rewards"]["judge/0"] = 0.25
    messages = mas_data.workflow_messages(record)
    assert [(m.agent, m.round, m.call, m.reward) for m in messages] == [
        ("tool", 0, 0, -1.0),
        ("reasoner", 0, 0, 0.0),
        ("tool", 1, 1, 1.5),
        ("reasoner", 1, 1, 2.0),
    ]
    assert [m.reward_key for m in messages] == ["tool/0", "reasoner/0", "tool/1", "reasoner/1"]
    assert mas_data.unmatched_rewards(record, messages) == {"judge/0": 0.25}
    table = mas_data.message_table(messages)
    assert list(table["reward"]) == [-1.0, 0.0, 1.5, 2.0]


def test_mean_reward_per_role_and_step(records: list[dict[str, Any]]) -> None:
    totals: dict[tuple[int, str], list[float]] = defaultdict(list)
    for record in records:
        for role in ROLES:
            rewards = [v for k, v in record["rewards"].items() if k.startswith(f"{role}/")]
            totals[(record["step"], role)].append(sum(rewards))
    summary = mas_data.role_reward_summary(records)
    assert len(summary) == len(totals) == 2 * len(ROLES)
    for (step, role), values in totals.items():
        row = row_where(summary, step=step, role=role)
        assert row["problems"] == len(values) == 2
        assert row["mean_reward"] == pytest.approx(sum(values) / len(values))

    # Two calls of one role in a problem: summed per problem, then averaged over problems.
    made = [
        {"kind": "workflow", "step": 3, "rewards": {"tool/0": 1.0, "tool/1": 2.0, "reasoner/0": 2}},
        {"kind": "workflow", "step": 3, "rewards": {"tool/0": -1.0, "reasoner/0": 0.0}},
    ]
    tool = row_where(mas_data.role_reward_summary(made), step=3, role="tool")
    assert (tool["problems"], tool["calls"]) == (2, 3)
    assert (tool["mean_reward"], tool["mean_reward_per_call"]) == pytest.approx((1.0, 2 / 3))


def test_checkpoints_per_policy_in_either_layout(root: Path, tmp_path: Path) -> None:
    run = next(r for r in data.scan_runs(root).entries if r.name == MAS_RUN)
    table = mas_data.policy_checkpoints(root, run.path, run.config, list(ROLES))
    coder = row_where(table, policy="coder")
    assert (coder["roles"], coder["checkpoints"]) == ("tool", "policies/coder/checkpoints")
    assert (coder["saved steps"], coder["last"]) == ("1, 2", 2)
    assert row_where(table, policy="thinker")["roles"] == "reasoner"

    # One shared policy: RUN/checkpoints/step_N; a folder without checkpoint.json is unfinished.
    shared = RunDir.resolve(out=None, run_dir=tmp_path / "shared", kind="train", slug="mas")
    shared.start(command=["test"], config={"workflow": "reasoner_tool", "policies": {}})
    for step, complete in ((1, True), (3, True), (4, False)):
        folder = shared.path / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "checkpoint.json").write_text("{}")
    (entry,) = mas_data.mas_training_runs(data.scan_runs(tmp_path).entries)
    (row,) = mas_data.policy_checkpoints(
        tmp_path, entry.path, entry.config, ["tool", "reasoner"]
    ).itertuples(index=False)
    shared_row = (mas_data.SHARED_POLICY, "tool, reasoner", "checkpoints", "1, 3", 3, "whole model")
    assert row == shared_row
    # An adapter checkpoint names its base; a frozen partner saves none.
    last = shared.path / "checkpoints" / "step_3"
    (last / "adapter_config.json").write_text("{}")
    (last / "checkpoint.json").write_text('{"adapter": {"name": "policy", "base": "/m/tiny"}}')
    assert mas_data.checkpoint_kind(last) == "LoRA adapter on tiny"


def test_a_mas_loops_training_columns_are_not_action_shares() -> None:
    curve = pd.DataFrame(
        [
            {
                "step": 2,
                "train/policy/coder/loss": -0.2,
                "train_metrics/policy/coder/kl": 0.1,
                "exploit-kuhn_poker/policy/Q p/BET": 0.5,
            }
        ]
    )
    table = data.action_share_table(curve)
    assert list(table["game"]) == ["exploit-kuhn_poker"] and list(table["share"]) == [0.5]


# ---------------------------------------------------------------- the page


def _chart_data(test: AppTest, title: str) -> pd.DataFrame:
    """The data of the chart titled `title` (its datasets as Arrow streams), concatenated."""
    for chart in test.get("vega_lite_chart"):
        if json.loads(chart.proto.spec).get("title") == title:
            frames = [pa.ipc.open_stream(d.data.data).read_pandas() for d in chart.proto.datasets]
            return pd.concat(frames, ignore_index=True)
    titles = [json.loads(c.proto.spec).get("title") for c in test.get("vega_lite_chart")]
    raise AssertionError(f"no chart titled {title!r}: {titles}")


def test_training_page_shows_the_mas_run_role_by_role(
    app: OpenPage, metrics_rows: list[dict[str, Any]], records: list[dict[str, Any]]
) -> None:
    test = app("Training", via="url", run=MAS_RUN)
    assert test.selectbox(key="mas_run").options == [MAS_RUN]
    captions = texts(test.caption)
    assert any("workflow `reasoner_tool`" in c and "one policy per role" in c for c in captions)

    returns = _chart_data(test, "return by role (all branches)")
    shown = {(r.step, r.role): r.return_mean for r in returns.itertuples()}
    assert shown == pytest.approx(
        {(row["step"], role): row[f"return_mean/{role}"] for row in metrics_rows for role in ROLES}
    )
    wide = table_with(test, "step", "tool", "reasoner")
    assert list(wide["tool"]) == pytest.approx([row["return_mean/tool"] for row in metrics_rows])
    loss = _chart_data(test, "loss by policy")
    assert set(loss["policy"]) == set(ROLES.values())
    updates = table_with(test, "step", "policy", "loss", "kl", "grad_norm")
    thinker = row_where(updates, step=2, policy="thinker")
    assert thinker["grad_norm"] == pytest.approx(metrics_rows[-1]["policy/thinker/grad_norm"])
    accuracy = table_with(test, "series", "accuracy", "ci_low")
    heldout = row_where(accuracy, series=mas_data.HELDOUT_SERIES)
    # (train accuracy has no interval: the column shows "-" there, so it is text)
    assert number(heldout["ci_high"]) == pytest.approx(
        metrics_rows[-1]["eval/accuracy_ci95_high"], rel=1e-5
    )
    checkpoints = table_with(test, "policy", "roles", "saved steps")
    assert row_where(checkpoints, policy="coder")["saved steps"] == "1, 2"
    rewards = table_with(test, "role", "mean_reward", "mean_reward_per_call")
    assert len(rewards) == 4

    # The transcript browser opens on the last step; pick step 1 and its second problem.
    assert test.selectbox(key="mas_step").value == 2
    test.selectbox(key="mas_step").set_value(1).run()
    step_one = [i for i, record in enumerate(records) if record["step"] == 1]
    assert test.selectbox(key="mas_problem").options == [
        f"{records[i]['problem_id']} · {'correct' if records[i]['correct'] else 'wrong'}"
        for i in step_one
    ]
    test.selectbox(key="mas_problem").set_value(step_one[1]).run()
    assert not test.exception, [e.value for e in test.exception]
    record = records[step_one[1]]
    assert metric(test, "reference") == record["reference"]
    assert metric(test, "correct") == ("yes" if record["correct"] else "no")
    messages = table_with(test, "agent", "round", "call", "reward key", "reward")
    expected = _expected_message_rewards(record)
    assert list(messages["agent"]) == [agent for agent, _ in expected]
    assert list(messages["reward"]) == pytest.approx([reward for _, reward in expected])
    code = texts(test.code)  # st.code shows its text stripped
    for message in record["transcript"]["messages"]:
        assert (message["text"].strip() or "(empty)") in code
    assert (record["transcript"]["final_answer"] or "-").strip() in code
    heads = [m for m in texts(test.markdown) if m.startswith("**1. tool**")]
    assert heads == [f"**1. tool** · round 0 · call 0 · reward {expected[0][1]:.2f} (`tool/0`)"]


def test_the_game_runs_view_is_unchanged_beside_a_mas_run(app: OpenPage, root: Path) -> None:
    test = app("Training")
    latest = table_with(test, "run", "steps", "last step")
    assert number(row_where(latest, run=GAME_RUN)["loss"]) == pytest.approx(1 / 3, rel=1e-5)
    wins = table_with(test, "opponent", "seat", "win")
    assert set(wins["run"]) == {GAME_RUN}
    # Only game runs: no MAS section at all.
    game_only = root.parent / "game-only"
    synthetic.write_train_run(game_only / GAME_RUN, 2)
    test = app("Training", runs_root=game_only)
    assert not any(s == "MAS training, role by role" for s in texts(test.subheader))
    assert not [e for e in test.selectbox if e.key == "mas_run"]
