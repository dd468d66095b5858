"""The policy against equilibrium (issue 41, item 2): Kuhn's equilibrium ranges and Leduc's CFR+
reference, deviations flagged, OpenSpiel's best response per state, exploitability from the
recorded shares, run A minus run B; and the Training page that shows them, over train runs whose
metrics.jsonl rows are written by the trainer's own `metrics_of` from exact policies."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyspiel
import pytest
from dashboard_apptest import chart_specs, page_opener, row_where, texts

from core.runstore import RunDir
from dashboard import data
from dashboard.data import equilibrium, policy
from games import solvers
from games.exploitability import StateTally, action_shares, legal_labels, summarize
from games.infostates import information_states
from games.spec import get_game
from train_backend.local.exploitability import metrics_of

THIRD = 1 / 3
# P(BET) per state over Kuhn's equilibria, worked out by hand from the alpha family.
KUHN_RANGES = {
    "J -": (0, THIRD),
    "Q -": (0, 0),
    "K -": (0, 1),
    "J pb": (0, 0),
    "Q pb": (THIRD, 2 * THIRD),
    "K pb": (1, 1),
    "J p": (THIRD, THIRD),
    "Q p": (0, 0),
    "K p": (1, 1),
    "J b": (0, 0),
    "Q b": (THIRD, THIRD),
    "K b": (1, 1),
}
GROUPED = [  # player 0 first, then player 1; within a player by history, then card
    f"P{seat} {history} {card}"
    for seat, histories in ((0, ("-", "pb")), (1, ("p", "b")))
    for history in histories
    for card in "JQK"
]
EQUILIBRIUM = {title: low for title, (low, _) in KUHN_RANGES.items()}  # alpha = 0
ISSUE_POLICY = EQUILIBRIUM | {"Q -": 0.51, "J b": 0.28}  # what the issue saw at step 50
UNIFORM = dict.fromkeys(KUHN_RANGES, 0.5)
ALWAYS_BET = dict.fromkeys(KUHN_RANGES, 1.0)


def _kuhn_shares(bets: Mapping[str, float], x: Any = 0) -> pd.DataFrame:
    rows = [
        {"x": x, "game": "kuhn_poker", "state": state, "action": action, "share": share}
        for state, bet in bets.items()
        for action, share in (("PASS", 1 - bet), ("BET", bet))
    ]
    return pd.DataFrame(rows)


def _tallies(game: str, policy_of: Any) -> list[StateTally]:
    """Exact tallies of a policy given as state -> probabilities in OpenSpiel's action order."""
    spec = get_game(game)
    return [
        StateTally(state, legal_labels(spec, state), [0] * len(state.legal), exact=policy_of(state))
        for state in information_states(spec)
    ]


def _metrics(bets: Mapping[str, float]) -> dict[str, float]:
    """The trainer's metrics.jsonl fields of an exact Kuhn policy (as its evaluation writes
    them for a sampled one)."""

    def of(state: Any) -> tuple[float, float]:
        bet = bets[f"{'JQK'[int(state.key[0])]} {state.key[1:] or '-'}"]
        return (1 - bet, bet)

    return metrics_of(summarize(get_game("kuhn_poker"), _tallies("kuhn_poker", of)), samples=0)


def _leduc_metrics(solved: bool) -> dict[str, float]:
    """Leduc's fields (per private card) of the CFR+ policy, or of the uniform one."""
    table, _ = equilibrium.leduc_solution()

    def of(state: Any) -> tuple[float, ...]:
        if not solved:
            return tuple(1 / len(state.legal) for _ in state.legal)
        probabilities = dict(table[state.key])
        return tuple(probabilities[a] for a in state.legal)

    return metrics_of(summarize(get_game("leduc_poker"), _tallies("leduc_poker", of)), samples=0)


def _train_run(path: Path, evaluations: Mapping[int, dict[str, float]]) -> None:
    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="train")
    run.start(command=["mars", "train"], config={}, model="tiny")
    with (run.path / "metrics.jsonl").open("w") as handle:
        for step in range(0, 51, 10):
            row: dict[str, Any] = {"step": step, "loss": 1 / (step + 1), "reward_mean": step / 50}
            handle.write(json.dumps(row | evaluations.get(step, {})) + "\n")
    run.finish()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    _train_run(root / "train-a", {0: _metrics(UNIFORM), 50: _metrics(ISSUE_POLICY)})
    _train_run(root / "train-b", {0: _metrics(UNIFORM), 50: _metrics(ALWAYS_BET)})
    _train_run(root / "train-leduc", {0: _leduc_metrics(False), 50: _leduc_metrics(True)})
    return root


@pytest.fixture(scope="module")
def app(root: Path) -> Iterator[Any]:
    with page_opener(root) as open_page:
        yield open_page


def test_kuhn_ranges_of_all_twelve_states() -> None:
    ranges = data.kuhn_reference().ranges
    assert set(ranges) == set(KUHN_RANGES)
    for title, (low, high) in KUHN_RANGES.items():
        assert ranges[title]["BET"] == pytest.approx((low, high)), title
        assert ranges[title]["PASS"] == pytest.approx((1 - high, 1 - low)), title


def test_the_family_is_equilibrium_and_leaving_a_range_is_exploitable() -> None:
    for alpha in (0, 1 / 6, THIRD):
        table = equilibrium.kuhn_equilibrium(alpha)
        assert solvers.nash_conv("kuhn_poker", table) == pytest.approx(0, abs=1e-12)
    off = policy.policy_table_at(_kuhn_shares(EQUILIBRIUM | {"Q -": 0.2}), "kuhn_poker", 0)
    assert off is not None and solvers.nash_conv("kuhn_poker", off) > 0.01


def test_deviations_are_flagged_with_their_size() -> None:
    bets = ISSUE_POLICY | {"J -": 0.2, "Q pb": 0.2}
    view = data.policy_view(_kuhn_shares(bets, x=50), "kuhn_poker", slack=0.05)
    assert [r.label for r in view.rows] == GROUPED
    grid = data.policy_grid(view).assign(label=GROUPED).set_index("label")
    assert grid.loc["P0 - Q", "deviation (last)"] == pytest.approx(0.51)
    assert grid.loc["P1 b J", "deviation (last)"] == pytest.approx(0.28)
    assert grid.loc["P0 pb Q", "deviation (last)"] == pytest.approx(0.2 - THIRD)
    assert grid.loc["P0 - J", "deviation (last)"] == 0  # inside [0, 1/3]
    assert grid.loc["P0 - Q", "outside at"] == "50" and grid.loc["P0 - J", "outside at"] == ""
    assert grid.loc["P1 b J", "move"] == "call" and grid.loc["P1 p J", "move"] == "bet"
    flagged = [(d["label"], round(d["deviation"], 4)) for d in data.last_deviations(view)]
    assert flagged == [("P0 - Q", 0.51), ("P1 b J", 0.28), ("P0 pb Q", -0.1333)]
    # With more slack than the Queen's gap, only the two large ones stay flagged.
    loose = data.policy_view(_kuhn_shares(bets, x=50), "kuhn_poker", slack=0.2)
    assert {d["label"] for d in data.last_deviations(loose)} == {"P0 - Q", "P1 b J"}


def test_player_0s_states_must_agree_on_one_alpha() -> None:
    inside = EQUILIBRIUM | {"J -": 0.3, "K -": 0.1, "Q pb": 0.5}  # each within its range
    view = data.policy_view(_kuhn_shares(inside), "kuhn_poker")
    assert data.last_deviations(view) == []
    assert data.kuhn_alphas(view) == pytest.approx(
        {"J -": 0.3, "K -": 0.1 / 3, "Q pb": 0.5 - THIRD}
    )
    table = policy.policy_table_at(_kuhn_shares(inside), "kuhn_poker", 0)
    assert table is not None and solvers.nash_conv("kuhn_poker", table) > 0.01  # not an equilibrium
    member = EQUILIBRIUM | {"J -": 0.1, "K -": 0.3, "Q pb": 0.1 + THIRD}
    alphas = data.kuhn_alphas(data.policy_view(_kuhn_shares(member), "kuhn_poker"))
    assert alphas == pytest.approx(dict.fromkeys(("J -", "K -", "Q pb"), 0.1))


def test_exploitability_of_the_uniform_policy_is_openspiels() -> None:
    shares = pd.concat([_kuhn_shares(UNIFORM, 0), _kuhn_shares(EQUILIBRIUM, 10)])
    shares = pd.concat([shares, _kuhn_shares({"J -": 0.5}, 20)])  # incomplete: left out
    table = data.exploitability_by_x(shares, "kuhn_poker")
    assert list(table["x"]) == [0, 10]
    assert table["exploitability"].iloc[0] == pytest.approx(11 / 24)  # 0.4583...
    uniform = pyspiel.exploitability(
        pyspiel.load_game("kuhn_poker"),
        pyspiel.UniformRandomPolicy(pyspiel.load_game("kuhn_poker")),
    )
    assert table["exploitability"].iloc[0] == pytest.approx(uniform)
    assert table["exploitability"].iloc[1] == pytest.approx(0, abs=1e-12)


def test_best_response_per_state_against_the_uniform_policy() -> None:
    table = data.policy_table_at(_kuhn_shares(UNIFORM), "kuhn_poker", 0)
    assert table is not None
    states = data.best_response_by_state("kuhn_poker", table).set_index("state")
    # Player 1 holding K facing a bet: player 0 bet J or Q (1/6 each, times 1/2): calling wins
    # 2 x 2/12 = 1/3, folding loses 2/12, the uniform mix is 1/12; gain 1/3 - 1/12 = 1/4.
    king = states.loc["P1 b K"]
    assert king["best response"] == "BET"
    assert (king["value of best response"], king["value of policy"]) == pytest.approx(
        (1 / 3, 1 / 12)
    )
    assert king["gain"] == pytest.approx(0.25)
    jack = states.loc["P1 b J"]  # folding loses 2/12, calling 4/12: the mix -3/12
    assert jack["best response"] == "PASS" and jack["gain"] == pytest.approx(1 / 12)
    assert states.loc["P0 pb K", "reach"] == pytest.approx(0.5)  # player 0's own pass
    assert states["gain"].sum() == pytest.approx(11 / 12)  # NashConv
    assert list(states.index) == GROUPED


def test_leduc_reference_from_cfr_is_cached_and_matches_the_trainers_grouping() -> None:
    started = time.perf_counter()
    ref = data.leduc_reference()
    assert data.leduc_reference().ranges == ref.ranges
    assert time.perf_counter() - started < 20
    assert 0 < ref.exploitability < 0.02  # 0.0134 after 100 CFR+ iterations
    assert len(ref.ranges) == 936 + 3
    table, _ = equilibrium.leduc_solution()
    # The trainer averages each private card's states plainly; so does the reference.
    spec = get_game("leduc_poker")
    tallies = []
    for state in information_states(spec):
        probabilities = dict(table[state.key])
        exact = tuple(probabilities[a] for a in state.legal)
        tallies.append(StateTally(state, legal_labels(spec, state), [0] * len(exact), exact=exact))
    grouped = action_shares(spec, tallies)
    for card in "JQK":
        for action, share in grouped[f"card {card}"].items():
            low, high = ref.ranges[f"card {card}"][action]
            assert low <= share <= high and high - low <= 2 * equilibrium.LEDUC_TOLERANCE + 1e-12
    # Its best response state by state adds up to OpenSpiel's NashConv of the CFR+ policy.
    states = data.best_response_by_state("leduc_poker", table)
    assert len(states) == 936
    assert states["gain"].sum() == pytest.approx(solvers.nash_conv("leduc_poker", table), rel=1e-6)
    # A grouped Leduc record: the CFR+ mean is inside, a card raising 0.3 more is flagged.
    rows = [
        {"x": 1, "game": "leduc_poker", "state": "card K", "action": a, "share": s}
        for a, s in grouped["card K"].items()
    ]
    shares = pd.DataFrame(rows)
    view = data.policy_view(shares, "leduc_poker")
    assert view.long["flagged"].sum() == 0 and len(view.rows) == 9
    raised = shares.assign(share=shares["share"] + (shares["action"] == "RAISE") * 0.3)
    (found,) = data.last_deviations(data.policy_view(raised, "leduc_poker"))
    assert found["label"] == "card K · RAISE"
    assert found["deviation"] == pytest.approx(0.3 - equilibrium.LEDUC_TOLERANCE)


def test_run_a_minus_run_b() -> None:
    a = data.policy_view(_kuhn_shares(ISSUE_POLICY, 50), "kuhn_poker")
    b = data.policy_view(
        pd.concat([_kuhn_shares(ALWAYS_BET, 40), _kuhn_shares(UNIFORM, 60)]), "kuhn_poker"
    )
    diff = data.policy_difference(a, b).set_index("state")
    assert len(diff) == 12
    queen = diff.loc["P0 - Q"]  # B's last checkpoint is 60: uniform
    assert (queen["A"], queen["B"], queen["A - B"]) == pytest.approx((0.51, 0.5, 0.01))
    assert (queen["A deviation"], queen["B deviation"]) == pytest.approx((0.51, 0.5))
    assert diff.loc["P1 b K", "A - B"] == pytest.approx(0.5)


def _tables_with(test: Any, column: str) -> list[pd.DataFrame]:
    return [e.value for e in test.dataframe if column in e.value.columns]


def test_the_training_page_shows_the_policy_against_equilibrium(app: Any) -> None:
    """One page load (AppTest reruns are seconds each): heatmap, grid, flags, best response,
    A minus B, and exploitability on the curves' step axis."""
    test = app("Training")
    specs = {s.get("title"): s for s in chart_specs(test) if isinstance(s.get("title"), str)}
    heat = specs["train-a · kuhn_poker"]
    y = heat["layer"][0]["encoding"]["y"]
    assert y["scale"]["domain"] == GROUPED and y["sort"] == GROUPED  # all 12, grouped
    assert heat["layer"][0]["encoding"]["color"]["title"] == "P(bet or call)"
    assert heat["layer"][0]["encoding"]["x"]["scale"]["domain"] == ["0", "50", "Nash"]
    assert any(layer["mark"].get("stroke") == "#d62728" for layer in heat["layer"])  # flagged

    grid_a, grid_b, grid_leduc = _tables_with(test, "deviation (last)")
    grid_a = grid_a.assign(label=GROUPED).set_index("label")
    queen = grid_a.loc["P0 - Q"]
    assert (queen["Nash low"], queen["Nash high"], queen["0"], queen["50"]) == (0, 0, 0.5, 0.51)
    assert queen["deviation (last)"] == pytest.approx(0.51) and queen["outside at"] == "0, 50"
    assert grid_a.loc["P1 b J", "deviation (last)"] == pytest.approx(0.28)
    assert grid_a.loc["P0 - K", "outside at"] == ""  # 0.5 then 0: inside [0, 1] throughout
    assert grid_b.set_index(pd.Index(GROUPED)).loc["P1 b J", "50"] == 1.0
    # Leduc, recorded per private card: the CFR+ policy at step 50 is inside every range, the
    # uniform one at step 0 is not.
    leduc = specs["train-leduc · leduc_poker"]["layer"][0]["encoding"]
    cards = [f"card {c} · {a}" for c in "JQK" for a in ("FOLD", "CALL", "RAISE")]
    assert leduc["y"]["scale"]["domain"] == cards and leduc["color"]["title"] == "P(RAISE)"
    assert set(grid_leduc["deviation (last)"]) == {0}
    assert (grid_leduc["outside at"] != "").any()
    markdown = " ".join(texts(test.markdown))
    assert "**P0 - Q**: 0.51 at step 50, range 0, off by +0.51" in markdown
    assert "**P1 b J**: 0.28 at step 50, range 0, off by +0.28" in markdown
    captions = " ".join(texts(test.caption))
    assert "alpha = 0.00 (J -), 0.00 (K -), 0.00 (Q pb)" in captions  # 0.33 - 1/3 = -0.003

    # Best response to train-a at step 50: the gains add up to the run's own recorded figure.
    (states,) = _tables_with(test, "best response")
    recorded = _metrics(ISSUE_POLICY)["exploitability/kuhn_poker"]
    assert states["gain"].sum() == pytest.approx(2 * recorded)
    assert f"recorded by the run: {recorded:.4f}" in " ".join(texts(test.caption))
    test.select_slider(key="train_policy_br_x").set_value(0).run()
    (states,) = _tables_with(test, "best response")
    assert row_where(states, state="P1 b K")["gain"] == pytest.approx(0.25)

    (diff,) = _tables_with(test, "A - B")
    queen = row_where(diff, state="P0 - Q")
    assert (queen["A"], queen["B"], queen["A - B"]) == pytest.approx((0.51, 1.0, -0.49))
    assert (queen["A deviation"], queen["B deviation"]) == pytest.approx((0.51, 1.0))
    assert "train-a · kuhn_poker minus train-b · kuhn_poker" in specs

    # Exploitability (measured at steps 0 and 50) on the steps of the training curves.
    assert specs["loss"]["encoding"]["x"]["scale"]["domain"] == [0, 50]
    (exploit,) = [s for s in chart_specs(test) if '"exploitability"' in json.dumps(s)]
    assert [layer["encoding"]["x"]["scale"]["domain"] for layer in exploit["layer"]] == [
        [0, 50]
    ] * 2
