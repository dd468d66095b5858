"""The training inspector (issue 41, item 1): a tree step's states and, at one state, its K
branches side by side; the collapse signals over steps; training self-play in the Games replay.

The run directories are real (RunDir, the branch log's own writer, metrics.jsonl rows carrying the
signals the trainer computes); the branch lines are written by hand so that each figure on the
page can be checked against a known value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_apptest import chart_specs, page_opener, table_with, texts

from core import branch_log
from core.runstore import RunDir
from dashboard.data import branches as inspected

K_PROMPT = "Kuhn poker.\nYou are Player {seat}.\nState:\n{view}\nLegal: <PASS> <BET>"


def _branch(step: int, episode: int, seat: int, view: str, b: int, action: str | None, ret: float,
            advantage: float, chosen: int) -> dict[str, Any]:  # fmt: skip
    return branch_log.branch_line(
        step=step,
        game="kuhn_poker",
        episode=episode,
        seat=seat,
        turn=0,
        state=f"key-{seat}-{view}",
        observation=K_PROMPT.format(seat=seat + 1, view=view),
        branch=b,
        chosen=b == chosen,
        reply=f"{view}\n<answer>{action or '???'}</answer>",
        action=action,
        legal=action is not None,
        reward=0.05 if action else -1.0,
        ret=ret,
        advantage=advantage,
        trained=advantage != 0,
    )


def step_lines(step: int) -> list[dict[str, Any]]:
    """Three groups: 'card K' with a spread (one invalid), 'card J' flat, twice 'card Q' (two
    episodes at one state)."""
    return [
        _branch(step, 1, 0, "card K; bets: none yet", 0, "<BET>", 2.0, 0.9, 0),
        _branch(step, 1, 0, "card K; bets: none yet", 1, "<PASS>", 1.0, 0.1, 0),
        _branch(step, 1, 0, "card K; bets: none yet", 2, None, -1.0, -1.0, 0),
        _branch(step, 2, 1, "card J; bets: opponent bet", 0, "<PASS>", -1.0, 0.0, 1),
        _branch(step, 2, 1, "card J; bets: opponent bet", 1, "<PASS>", -1.0, 0.0, 1),
        _branch(step, 3, 0, "card Q; bets: none yet", 0, "<BET>", 1.0, 0.5, 0),
        _branch(step, 3, 0, "card Q; bets: none yet", 1, "<PASS>", 0.0, -0.5, 0),
        _branch(step, 4, 0, "card Q; bets: none yet", 0, "<PASS>", 1.0, 0.0, 1),
        _branch(step, 4, 0, "card Q; bets: none yet", 1, "<PASS>", 1.0, 0.0, 1),
    ]


def _train_run(path: Path, steps: int) -> None:
    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="train")
    run.start(command=["mars", "train"], config={"games": ["kuhn_poker"]}, model="tiny")
    records = []
    with (run.path / "metrics.jsonl").open("w") as handle:
        for step in range(1, steps + 1):
            lines = step_lines(step)
            branch_log.write_step(run.path, step, lines)
            row = {"step": step, "loss": 0.1} | branch_log.collapse_signals(lines)
            handle.write(json.dumps(row) + "\n")
            records.append(_episode(step))
    with (run.path / "records.jsonl").open("w") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    run.finish()


def _episode(step: int) -> dict[str, Any]:
    """A self-play record as the trainer writes it: J vs K, both pass, seat 1 wins."""
    return {
        "schema_version": 1,
        "kind": "selfplay",
        "game": "kuhn_poker",
        "seed": 100 + step,
        "step": step,
        "players": ["policy", "policy"],
        "returns": [-1.0, 1.0],
        "rewards": [-1.0, 1.0],
        "outcomes": ["loss", "win"],
        "invalid": False,
        "turns": [
            {"seat": -1, "turn": 0, "action": "Deal:0", "legal": True, "reward": 0.0},
            {"seat": -1, "turn": 1, "action": "Deal:2", "legal": True, "reward": 0.0},
            _model_turn(0),
            _model_turn(1),
        ],
    }


def _model_turn(seat: int) -> dict[str, Any]:
    reply = "<answer><PASS></answer>"
    return {"seat": seat, "turn": 0, "action": "<PASS>", "legal": True, "reward": 0.0,
            "reply": reply, "usage": {"completion_tokens": 5}}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    _train_run(root / "train-kuhn", steps=3)
    return root


@pytest.fixture(scope="module")
def app(root: Path) -> Iterator[Any]:
    with page_opener(root) as open_page:
        yield open_page


def test_the_states_table_counts_each_states_groups_actions_and_returns() -> None:
    table = inspected.states_table(step_lines(1)).set_index("label")
    assert list(table.index) == [
        "card K; bets: none yet",
        "card Q; bets: none yet",
        "card J; bets: opponent bet",
    ]  # by player, then label
    king = table.loc["card K; bets: none yet"]
    assert (king["groups"], king["branches"], king["invalid"]) == (1, 3, 1)
    assert king["actions"] == "<BET> x1 <PASS> x1 invalid x1"
    assert (king["return_min"], king["return_max"], king["trained"]) == (-1.0, 2.0, 3)
    queen = table.loc["card Q; bets: none yet"]
    assert (queen["groups"], queen["branches"], queen["flat_groups"]) == (2, 4, 1)
    assert table.loc["card J; bets: opponent bet", "flat_groups"] == 1
    groups = inspected.groups_at(step_lines(1), "key-0-card Q; bets: none yet")
    assert [[b["branch"] for b in g] for g in groups] == [[0, 1], [0, 1]]
    assert inspected.state_label({"role": "tool", "turn": 2}) == "tool call 2"


def test_the_inspector_shows_the_branches_of_the_liveliest_state_side_by_side(app) -> None:
    page = app("Inspector", via="url")
    assert "Training inspector" in texts(page.header)
    assert page.select_slider(key="inspector_step").value == 3  # the last step
    # first shown: the state whose returns spread widest (card K: -1 to 2)
    assert page.selectbox(key="inspector_state").value == "key-0-card K; bets: none yet"
    body = "\n".join(texts(page.markdown))
    assert "**branch 0 (main line)**" in body and "**branch 2**" in body
    assert "- action: `<BET>`" in body and "- advantage: `+0.900`" in body
    assert "- action: `-`" in body and "- legal: `False`" in body  # the invalid reply
    assert "- trained: `no`" not in body  # every branch here has an advantage
    states = table_with(page, "label", "actions", "flat_groups")
    assert len(states) == 3
    assert "3 branches at card K; bets: none yet" in texts(page.subheader)


def test_a_state_with_two_groups_offers_both_and_the_url_picks_step_and_state(app) -> None:
    page = app("Inspector", via="url", step="2", state="key-0-card Q; bets: none yet")
    assert page.select_slider(key="inspector_step").value == 2
    group = page.selectbox(key="inspector_group")
    assert len(group.options) == 2
    page = group.set_value(1).run()
    body = "\n".join(texts(page.markdown))
    assert "**branch 1 (main line)**" in body and "- trained: `no`" in body


def test_the_collapse_signals_are_drawn_over_steps(app, root: Path) -> None:
    page = app("Inspector", via="url")
    specs = chart_specs(page)
    assert len(specs) == 2
    rows = [json.loads(line) for line in (root / "train-kuhn" / "metrics.jsonl").open()]
    shares = inspected.signals_frame(pd.DataFrame(rows))
    flat = shares[shares["signal"] == "flat_group_share"]["value"].tolist()
    assert flat == [0.5, 0.5, 0.5]  # two of four groups flat at every step
    metric_values = {m.label: m.value for m in page.metric}
    assert metric_values["flat group share"] == "0.50"
    assert metric_values["branches logged"] == "9"


def test_training_self_play_opens_in_the_games_replay(app) -> None:
    page = app("Games", via="url", run="train-kuhn")
    outcomes = table_with(page, "opponent", "seat", "win %").set_index("seat")
    assert set(outcomes["opponent"]) == {"self-play"}  # the policy in both seats, 3 episodes
    assert outcomes.loc["first", "loss %"] == 100 and outcomes.loc["second", "win %"] == 100
    assert outcomes.loc["first", "n"] == 3
    assert page.selectbox(key="games_step").value == 3  # the last step first
    assert len(page.selectbox(key="games_ep").options) == 1
    page = page.selectbox(key="games_step").set_value(1).run()
    assert page.selectbox(key="games_ep").options == ["seed 101 · self-play · returns -1.00 / 1.00"]


def test_without_branch_logs_the_page_says_how_to_get_them(tmp_path: Path) -> None:
    with page_opener(tmp_path) as open_page:
        page = open_page("Inspector", via="url")
    assert any("estimator at_grpo" in text for text in texts(page.info))
