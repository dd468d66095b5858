"""The training inspector (issue 41, item 1; issue 53, items 3, 4 and 6): a tree step's states and,
at one state, its K branches side by side, forced ones marked; the collapse signals over steps on
the sampled branches only; the episode's replay and the policy panel's row one click away; one
state across steps; the run opened last, else the longest-running train run.

The run directories are real (RunDir, the branch log's own writer, metrics.jsonl rows carrying the
signals a trainer computes); the branch lines are written by hand so that each figure on the page
can be checked against a known value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pandas as pd
import pytest
from dashboard_apptest import chart_specs, metric, page_opener, table_with, texts

from core import branch_log
from core.runstore import RunDir
from dashboard.data import branches as inspected

K_PROMPT = "Kuhn poker.\nYou are Player {seat}.\nState:\ncard {view}\nLegal: <PASS> <BET>"
KING, JACK, QUEEN = "K; bets: none yet", "J; bets: opponent BET", "Q; bets: none yet"
ALL_ACTIONS = {"games": ["kuhn_poker"], "tree": {"branches": 4, "all_actions": True}}


def _branch(step: int, episode: int, seat: int, view: str, b: int, action: str | None, ret: float,
            advantage: float, chosen: int, forced: bool = False) -> dict[str, Any]:  # fmt: skip
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
        forced=forced,
        reply=f"{view}\n<answer>{action or '???'}</answer>",
        action=action,
        legal=action is not None,
        reward=0.05 if action else -1.0,
        ret=ret,
        advantage=advantage,
        trained=advantage != 0,
    )


def step_lines(step: int) -> list[dict[str, Any]]:
    """Four groups: card K with a spread (one invalid), card J flat, twice card Q (two episodes
    at one state), the first Q group's second branch forced to <PASS> by all-actions."""
    return [
        _branch(step, 1, 0, KING, 0, "<BET>", 2.0, 0.9, 0),
        _branch(step, 1, 0, KING, 1, "<PASS>", 1.0, 0.1, 0),
        _branch(step, 1, 0, KING, 2, None, -1.0, -1.0, 0),
        _branch(step, 2, 1, JACK, 0, "<PASS>", -1.0, 0.0, 1),
        _branch(step, 2, 1, JACK, 1, "<PASS>", -1.0, 0.0, 1),
        _branch(step, 3, 0, QUEEN, 0, "<BET>", 1.0, 0.5, 0),
        _branch(step, 3, 0, QUEEN, 1, "<PASS>", 0.0, -0.5, 0, forced=True),
        _branch(step, 4, 0, QUEEN, 0, "<PASS>", 1.0, 0.0, 1),
        _branch(step, 4, 0, QUEEN, 1, "<PASS>", 1.0, 0.0, 1),
    ]


def _set_times(run: RunDir, started: str, ended: str) -> None:
    info = json.loads(run.info_path.read_text())
    run.info_path.write_text(json.dumps(info | {"started_at": started, "ended_at": ended}))


def _train_run(
    path: Path, steps: int, *, metrics_rows: Any = None, policy_at: int | None = None
) -> RunDir:
    """A tree-sampled Kuhn run whose metrics carry the signals as a trainer that counted forced
    branches wrote them (`metrics_rows` replaces them), and (`policy_at`) the policy's shares."""
    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="train")
    run.start(command=["mars", "train"], config=ALL_ACTIONS, model="tiny")
    records = []
    with (run.path / "metrics.jsonl").open("w") as handle:
        for step in range(1, steps + 1):
            lines = step_lines(step)
            branch_log.write_step(run.path, step, lines)
            row = {"step": step, "loss": 0.1} | branch_log.collapse_signals(lines)
            if metrics_rows is not None:
                row = {"step": step} | metrics_rows(lines)
            if step == policy_at:
                row |= {"policy/kuhn_poker/K -/BET": 0.7, "policy/kuhn_poker/K -/PASS": 0.3}
            handle.write(json.dumps(row) + "\n")
            records += [_episode(step, seed) for seed in (1, 2, 3, 4)]
    with (run.path / "records.jsonl").open("w") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    run.finish()
    return run


def _episode(step: int, seed: int) -> dict[str, Any]:
    """A self-play record as the trainer writes it: two deals, both pass, seat 1 wins."""
    return {
        "schema_version": 1,
        "kind": "selfplay",
        "game": "kuhn_poker",
        "seed": seed,
        "step": step,
        "players": ["policy", "policy"],
        "returns": [-1.0, 1.0],
        "rewards": [-1.0, 1.0],
        "outcomes": ["loss", "win"],
        "invalid": False,
        "turns": [
            {"seat": -1, "turn": 0, "action": "Deal:0", "legal": True, "reward": 0.0},
            {"seat": -1, "turn": 1, "action": "Deal:2", "legal": True, "reward": 0.0},
            _model_turn(0, seed),
            _model_turn(1, seed),
        ],
    }


def _model_turn(seat: int, seed: int) -> dict[str, Any]:
    reply = f"<answer><PASS></answer> (seed {seed}, seat {seat})"
    return {"seat": seat, "turn": 0, "action": "<PASS>", "legal": True, "reward": 0.0,
            "reply": reply, "usage": {"completion_tokens": 5}}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    kuhn = _train_run(root / "train-kuhn", steps=3, policy_at=3)
    _set_times(kuhn, "2026-11-28T08:00:00+00:00", "2026-11-28T11:00:00+00:00")  # 3 hours
    short = _train_run(root / "train-short", steps=1, metrics_rows=inspected.step_signals)
    _set_times(short, "2026-11-29T08:00:00+00:00", "2026-11-29T08:01:00+00:00")  # the newest
    return root


@pytest.fixture(scope="module")
def app(root: Path) -> Iterator[Any]:
    with page_opener(root) as open_page:
        yield open_page


def _sampled_signals(lines: list[dict[str, Any]]) -> dict[str, float]:
    return branch_log.collapse_signals([line for line in lines if not line["forced"]])


def _links(page: Any) -> dict[str, dict[str, list[str]]]:
    """Every markdown link on the page: its text -> its URL's query."""
    found = {}
    for text in texts(page.markdown):
        for part in text.split("[")[1:]:
            label, _, rest = part.partition("](")
            url = rest.split(")")[0]
            found[label] = parse_qs(urlparse(url).query) | {"#": [urlparse(url).fragment]}
    return found


def test_the_states_table_counts_each_states_groups_actions_and_returns() -> None:
    table = inspected.states_table(step_lines(1)).set_index("label")
    assert list(table.index) == [f"card {KING}", f"card {QUEEN}", f"card {JACK}"]
    king = table.loc[f"card {KING}"]
    assert (king["groups"], king["branches"], king["invalid"], king["forced"]) == (1, 3, 1, 0)
    assert king["actions"] == "<BET> x1 <PASS> x1 invalid x1"
    assert king["entropy_bits"] == pytest.approx(1.585, abs=1e-3)  # three actions, once each
    assert (king["return_min"], king["return_max"], king["trained"]) == (-1.0, 2.0, 3)
    queen = table.loc[f"card {QUEEN}"]
    assert (queen["groups"], queen["branches"], queen["forced"], queen["flat_groups"]) == (
        2,
        4,
        1,
        1,
    )
    assert queen["actions"] == "<PASS> x2 <BET> x1"  # the forced <PASS> is not the policy's
    assert queen["entropy_bits"] == pytest.approx(0.918, abs=1e-3)
    assert table.loc[f"card {JACK}", "flat_groups"] == 1
    groups = inspected.groups_at(step_lines(1), f"key-0-{QUEEN}")
    assert [[b["branch"] for b in g] for g in groups] == [[0, 1], [0, 1]]
    assert inspected.state_label({"role": "tool", "turn": 2}) == "tool call 2"


def test_the_signals_of_a_step_leave_its_forced_branches_out() -> None:
    lines = step_lines(1)
    signals = inspected.step_signals(lines)
    counted = branch_log.collapse_signals(lines)
    assert signals == _sampled_signals(lines) | {"branches/forced": 1.0}
    # The forced <PASS> made the Queen's group look undecided and its group count: not now.
    assert signals["branches/action_entropy_bits"] < counted["branches/action_entropy_bits"]
    assert (signals["branches/groups"], counted["branches/groups"]) == (3.0, 4.0)


def test_the_inspector_shows_the_branches_of_the_liveliest_state_side_by_side(app) -> None:
    page = app("Inspector", via="url", run="train-kuhn")
    assert "Training inspector" in texts(page.header)
    assert page.select_slider(key="inspector_step").value == 3  # the last step
    # first shown: the state whose returns spread widest (card K: -1 to 2)
    assert page.selectbox(key="inspector_state").value == f"key-0-{KING}"
    body = "\n".join(texts(page.markdown))
    assert "**branch 0 (main line)**" in body and "**branch 2**" in body
    assert "- action: `<BET>`" in body and "- advantage: `+0.900`" in body
    assert "- action: `-`" in body and "- legal: `False`" in body  # the invalid reply
    assert "- trained: `no`" not in body  # every branch here has an advantage
    assert "- forced: `no`" in body and "forced]" not in body
    states = table_with(page, "label", "actions", "flat_groups", "forced")
    assert len(states) == 3
    assert "3 branches at card K; bets: none yet" in texts(page.subheader)


def test_a_state_with_two_groups_offers_both_and_marks_the_forced_branch(app) -> None:
    page = app("Inspector", via="url", run="train-kuhn", step="2", state=f"key-0-{QUEEN}")
    assert page.select_slider(key="inspector_step").value == 2
    group = page.selectbox(key="inspector_group")
    assert len(group.options) == 2
    body = "\n".join(texts(page.markdown))
    assert "**branch 1** · :orange[forced]" in body
    assert "- forced: `yes (all-actions rewrote its answer)`" in body
    page = group.set_value(1).run()
    body = "\n".join(texts(page.markdown))
    assert "**branch 1 (main line)**" in body and "- trained: `no`" in body
    assert "forced]" not in body


def test_the_collapse_signals_over_steps_leave_forced_branches_out(app, root: Path) -> None:
    page = app("Inspector", via="url", run="train-kuhn")
    specs = chart_specs(page)
    assert len(specs) == 3  # the shares, the entropy, the state across steps
    caption = " ".join(texts(page.caption))
    # The run's metrics counted the forced branches (no `branches/forced`): recomputed.
    assert "recomputed from the branch logs" in caption
    assert "Left out: 3 forced branches (all-actions rewrote their answer), 1.0 a step" in caption
    metrics = pd.DataFrame(_jsonl(root / "train-kuhn" / "metrics.jsonl"))
    assert not inspected.metrics_signals_are_sampled(metrics, ALL_ACTIONS)
    by_step = {step: inspected.step_signals(step_lines(step)) for step in (1, 2, 3)}
    long = inspected.signals_frame(inspected.logged_signals(by_step))
    entropy = long[long["signal"] == "action_entropy_bits"]["value"].tolist()
    sampled = _sampled_signals(step_lines(1))["branches/action_entropy_bits"]
    assert entropy == pytest.approx([sampled] * 3)
    assert sampled < metrics["branches/action_entropy_bits"].iloc[0]  # what the run counted
    assert metric(page, "forced (left out)") == "1"
    assert metric(page, "action entropy bits") == f"{sampled:.2f}"
    assert metric(page, "flat group share") == f"{2 / 3:.2f}"  # of 3 groups with 2 sampled
    assert metric(page, "branches logged") == "9"


def test_metrics_that_leave_forced_branches_out_are_drawn_as_they_are(app) -> None:
    page = app("Inspector", via="url", run="train-short")
    caption = " ".join(texts(page.caption))
    assert "from metrics.jsonl" in caption and "Left out: 1 forced branches" in caption
    # A run that could force nothing: its metrics are the sampled branches' already.
    plain = pd.DataFrame([{"step": 1, "branches/action_entropy_bits": 1.0}])
    assert inspected.metrics_signals_are_sampled(plain, {"tree": {"all_actions": False}})
    assert not inspected.metrics_signals_are_sampled(plain, ALL_ACTIONS)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_episode_replay_is_one_click_from_the_group(app) -> None:
    page = app("Inspector", via="url", run="train-kuhn", step="2")
    replay = _links(page)["replay episode 1 at this turn"]
    assert replay == {
        "page": ["games"],
        "run": ["train-kuhn"],
        "step": ["2"],
        "seed": ["1"],
        "seat_turn": ["0:0"],
        "#": [""],
    }
    games = app(
        "Games", via="url", **{k: v[0] for k, v in replay.items() if k not in ("#", "page")}
    )
    assert games.selectbox(key="games_run").value == "train-kuhn"
    assert games.selectbox(key="games_step").value == 2
    assert games.selectbox(key="games_ep").options[games.selectbox(key="games_ep").index] == (
        "seed 1 · self-play · returns -1.00 / 1.00"
    )
    # seat 0's first move is the replay's third turn (two deals before it)
    assert games.slider(key="games_turn").value == 2
    assert "<answer><PASS></answer> (seed 1, seat 0)" in texts(games.code)


def test_the_state_links_to_its_row_of_the_policy_panel(app) -> None:
    page = app("Inspector", via="url", run="train-kuhn")
    link = _links(page)["P0 - K of train-kuhn"]
    assert link == {
        "page": ["training"],
        "run": ["train-kuhn"],
        "policy_state": ["K -"],  # as metrics.jsonl names it: policy/kuhn_poker/K -/BET
        "#": ["policy-against-equilibrium"],
    }
    # The link opens Training on that run with the state's rows marked in the policy panel.
    training = app("Training", via="url", run="train-kuhn", policy_state="K -")
    assert training.multiselect(key="train_runs").value == ["train-kuhn"]
    assert "marked: K -, the state opened from the Inspector" in texts(training.caption)
    # A run that records no policy: the row is named, and the loop's panel linked.
    short = app("Inspector", via="url", run="train-short")
    assert "P0 - K of train-short" not in _links(short)
    assert any("policy panel row P0 - K" in c for c in texts(short.caption))


def test_one_state_across_steps(app) -> None:
    page = app("Inspector", via="url", run="train-kuhn", state=f"key-0-{QUEEN}")
    assert f"card {QUEEN}: across steps" in texts(page.subheader)
    table = table_with(page, "step", "groups", "branches", "forced", "entropy_bits")
    assert list(table["step"]) == [1, 2, 3]
    assert list(table["branches"]) == [4, 4, 4] and list(table["forced"]) == [1, 1, 1]
    assert list(table["actions"]) == ["<PASS> x2 <BET> x1"] * 3
    spec = json.dumps(chart_specs(page)[2])
    assert "share of sampled branches" in spec
    page = page.toggle(key="inspector_all_branches").set_value(True).run()
    branches = table_with(page, "step", "episode", "branch", "forced", "advantage")
    assert len(branches) == 3 * 4 and int(branches["forced"].sum()) == 3


def test_an_action_not_taken_at_a_step_has_a_share_of_0_there() -> None:
    bets_only = [line for line in step_lines(2) if line["action"] != "<PASS>"]
    digests = {1: inspected.step_digest(step_lines(1)), 2: inspected.step_digest(bets_only)}
    shares = inspected.action_shares_over_steps(digests, f"key-0-{KING}")
    table = shares.pivot(index="step", columns="action", values="share")
    assert table.loc[1].to_dict() == pytest.approx(
        {"<BET>": 1 / 3, "<PASS>": 1 / 3, "invalid": 1 / 3}
    )
    assert table.loc[2].to_dict() == pytest.approx({"<BET>": 0.5, "<PASS>": 0.0, "invalid": 0.5})
    assert inspected.action_shares_over_steps(digests, "no such state").empty


def test_the_page_opens_the_run_opened_last_else_the_longest_running(app, tmp_path: Path) -> None:
    # Nothing opened yet: the 3-hour run, not the newest (a 1-minute one).
    page = app("Inspector", via="url")
    assert page.selectbox(key="inspector_run").value == "train-kuhn"
    assert page.query_params["run"] == "train-kuhn"  # the URL names the run shown
    state = tmp_path / "state.json"
    app("Inspector", via="url", state_file=state, run="train-short")
    page = app("Inspector", via="url", state_file=state)
    assert page.selectbox(key="inspector_run").value == "train-short"
    games = app("Games", via="url", state_file=state)  # the same run on the Games page
    assert games.selectbox(key="games_run").value == "train-short"
    page = page.selectbox(key="inspector_run").set_value("train-kuhn").run()
    assert page.query_params["run"] == "train-kuhn"
    assert (
        app("Games", via="url", state_file=state).selectbox(key="games_run").value == "train-kuhn"
    )


def test_another_page_drops_the_last_pages_parameters(app) -> None:
    page = app("Inspector", via="url", run="train-kuhn", step="2", state=f"key-0-{QUEEN}")
    page.sidebar.radio(key="page").set_value("Games").run()
    assert not page.exception
    assert page.query_params.get("page") == "games"
    assert "step" not in page.query_params and "state" not in page.query_params


def test_without_branch_logs_the_page_says_how_to_get_them(tmp_path: Path) -> None:
    with page_opener(tmp_path) as open_page:
        page = open_page("Inspector", via="url")
    assert any("estimator at_grpo" in text for text in texts(page.info))
