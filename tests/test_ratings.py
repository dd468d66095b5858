"""Ratings (`games.ratings`, `mars ratings`) on hand-made arena records with a known order."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mars
from scipy.optimize import minimize

from core.errors import MarsError
from core.runstore import RunDir
from games.ratings import POINTS_PER_LOGIT, Collected, Match, collect_matches, rate, rate_game

TRUE = {"A": 1300.0, "B": 1100.0, "C": 900.0, "D": 700.0}  # mean 1000


def simulated(per_pair: int, seed: int = 1) -> list[Match]:
    """Games drawn from the Bradley-Terry model itself: a's expected score is p_a, some of it
    from draws (a draw is half a win)."""
    rng = random.Random(seed)
    names = list(TRUE)
    matches = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            p_a = 1.0 / (1.0 + 10 ** ((TRUE[b] - TRUE[a]) / 400.0))
            draw = 0.3 * min(p_a, 1.0 - p_a)
            win = p_a - draw / 2
            for _ in range(per_pair):
                u = rng.random()
                score = 1.0 if u < win else 0.5 if u < win + draw else 0.0
                matches.append(Match("tic_tac_toe", a, b, score))
    return matches


def record(game: str, seat: str, player: str, opponent: str, returns: list[float], **extra):
    players = [player, opponent] if seat == "first" else [opponent, player]
    return {
        "game": game,
        "seed": 0,
        "seat": seat,
        "player": player,
        "opponent": opponent,
        "players": players,
        "returns": returns,
        "outcomes": ["win" if r > 0 else "loss" if r < 0 else "draw" for r in returns],
        "error": None,
        "turns": [],
        **extra,
    }


def test_a_known_order_is_recovered_and_the_intervals_hold_the_true_ratings() -> None:
    fit = rate_game(simulated(150))
    rows = fit["players"]
    assert [row["player"] for row in rows] == ["A", "B", "C", "D"]
    assert [row["rank"] for row in rows] == [1, 2, 3, 4]
    assert np.mean([row["rating"] for row in rows]) == pytest.approx(1000.0)
    for row in rows:
        low, high = row["ci95"]
        assert low < row["rating"] < high
        assert low <= TRUE[row["player"]] <= high, row
        assert 40 < high - low < 200  # 450 games each: tens of points, not hundreds
        assert row["games"] == 450
    # Adjacent players' intervals do not overlap at this many games: the order is resolved.
    for better, worse in itertools.pairwise(rows):
        assert better["ci95"][0] > worse["ci95"][1]
    assert fit["connected"] and fit["games"] == 6 * 150


def test_fewer_games_give_wider_intervals_and_the_bootstrap_agrees_roughly() -> None:
    small, large = rate_game(simulated(20)), rate_game(simulated(200))
    width = {n: {r["player"]: r["ci95"][1] - r["ci95"][0] for r in f["players"]}
             for n, f in (("small", small), ("large", large))}  # fmt: skip
    for name in TRUE:
        ratio = width["small"][name] / width["large"][name]
        assert 2.0 < ratio < 4.5  # sqrt(10) = 3.2: intervals shrink like 1/sqrt(games)
    booted = rate_game(simulated(200), bootstrap=300, seed=3)
    for posterior, boot in zip(large["players"], booted["players"], strict=True):
        assert boot["rating"] == posterior["rating"]  # the same point estimate
        w_boot = boot["ci95"][1] - boot["ci95"][0]
        w_post = posterior["ci95"][1] - posterior["ci95"][0]
        assert 0.6 < w_boot / w_post < 1.4


def test_the_fit_is_the_maximum_of_the_posterior() -> None:
    matches = simulated(15, seed=7)
    fit = rate_game(matches, prior_sd=400.0)
    names = sorted(TRUE)
    precision = 1.0 / (400.0 / POINTS_PER_LOGIT) ** 2

    def negative_log_posterior(theta: np.ndarray) -> float:
        total = 0.5 * precision * float(theta @ theta)
        for m in matches:
            d = theta[names.index(m.a)] - theta[names.index(m.b)]
            total += m.score * math.log1p(math.exp(-d)) + (1 - m.score) * math.log1p(math.exp(d))
        return total

    best = minimize(negative_log_posterior, np.zeros(4), method="BFGS", options={"gtol": 1e-8}).x
    expected = 1000.0 + POINTS_PER_LOGIT * (best - best.mean())
    got = {row["player"]: row["rating"] for row in fit["players"]}
    for k, name in enumerate(names):
        assert got[name] == pytest.approx(expected[k], abs=0.01)


def test_an_unbeaten_player_stays_finite_and_an_anchor_is_pinned() -> None:
    matches = [Match("kuhn_poker", "nash", "random", 1.0)] * 30
    matches += [Match("kuhn_poker", "random", "ckpt", 1.0)] * 10
    matches += [Match("kuhn_poker", "random", "ckpt", 0.0)] * 10
    fit = rate_game(matches, anchor="random")
    rows = {row["player"]: row for row in fit["players"]}
    assert rows["random"]["rating"] == 1000.0 and rows["random"]["ci95"] == [1000.0, 1000.0]
    # 10 wins, 10 losses: level with random (the prior pulls all towards the mean: a bit above)
    assert rows["ckpt"]["rating"] == pytest.approx(1000.0, abs=15.0)
    assert 1300 < rows["nash"]["rating"] < 2000  # 30-0: far ahead, yet finite (the prior)
    low, high = rows["nash"]["ci95"]
    assert high - low > 300  # and honestly uncertain
    with pytest.raises(MarsError, match="--anchor 'minimax' played no game"):
        rate_game(matches, anchor="minimax")


def test_matches_from_records_score_by_returns_and_skip_what_compares_nothing() -> None:
    records = [
        record("tic_tac_toe", "first", "llm", "random", [1.0, -1.0]),  # player won as X
        record("tic_tac_toe", "second", "llm", "random", [1.0, -1.0]),  # random won as X
        # the opponent forfeited: outcomes say draw for the player, the returns say it won
        record("tic_tac_toe", "second", "llm", "random", [-1.0, 0.0]),
        record("kuhn_poker", "first", "llm", "cfr:100", [2.0, -2.0], player_id="/ck/step_5"),
        record("mini_hanabi", "first", "llm", "self", [3.0, 3.0]),  # cooperative
        record("tic_tac_toe", "first", "llm", "self", [1.0, -1.0]),  # the model against itself
        record("tic_tac_toe", "first", "llm", "random", [0.0, 0.0], error="seat 0: timeout"),
        record("no_such_game", "first", "llm", "random", [1.0, -1.0]),
    ]
    got = collect_matches(records, model="/ck/step_3")
    assert got.matches == [
        Match("tic_tac_toe", "/ck/step_3", "random", 1.0),
        Match("tic_tac_toe", "/ck/step_3", "random", 0.0),
        Match("tic_tac_toe", "/ck/step_3", "random", 1.0),
        Match("kuhn_poker", "/ck/step_5", "cfr:100", 1.0),
    ]
    assert got.skipped == {
        "cooperative games": 1,
        "games against itself": 1,
        "errored episodes": 1,
        "unknown game no_such_game": 1,
    }
    with pytest.raises(MarsError, match="no rated games in these records"):
        rate(collect_matches(records[4:6]))


def _arena_run(path: Path, records: list[dict], model: str | None) -> None:
    run = RunDir.resolve(out=None, run_dir=path, kind="arena", slug="x")
    run.start(command=["mars", "arena"], config={}, model=model)
    run.append_many(records)
    run.finish()


def _games(a: str, b: str, wins: int, draws: int, losses: int, **ids: str) -> list[dict]:
    """Records of a against b, seats alternating; returns as [a's, b's] before seating."""
    results = [[1.0, -1.0]] * wins + [[0.0, 0.0]] * draws + [[-1.0, 1.0]] * losses
    out = []
    for k, returns in enumerate(results):
        seat = "first" if k % 2 == 0 else "second"
        seated = returns if seat == "first" else returns[::-1]
        out.append(record("tic_tac_toe", seat, a, b, seated, **ids))
    return out


def test_mars_ratings_over_run_directories(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    ids_b = {"player_id": "/ck/step_2", "opponent_id": "/ck/step_1"}
    _arena_run(runs / "a", _games("llm", "random", 30, 4, 6), model="/ck/step_2")  # older records
    _arena_run(runs / "b", _games("llm", "llm:/ck/step_1", 24, 4, 12, **ids_b), model="/ck/step_2")
    _arena_run(runs / "c", _games("llm", "random", 22, 4, 14), model="/ck/step_1")
    loop = runs / "loop"  # a loop's run directory holding an arena sub-run
    _arena_run(loop / "step_3-arena", _games("llm", "random", 36, 2, 2), model="/ck/step_3")
    RunDir.resolve(out=None, run_dir=loop, kind="loop", slug="x").start(command=["mars"], config={})

    result = run_mars("ratings", str(runs / "a"), str(runs / "b"), str(runs / "c"), str(loop),
                      "--anchor", "random", "--save", str(tmp_path / "r.json"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"wrote {tmp_path / 'r.json'}"
    saved = json.loads((tmp_path / "r.json").read_text())
    fit = saved["games"]["tic_tac_toe"]
    order = [row["player"] for row in fit["players"]]
    assert order == ["/ck/step_3", "/ck/step_2", "/ck/step_1", "random"]
    assert fit["anchor"] == "random" and fit["games"] == 40 * 4
    assert "posterior" in saved["interval"] and len(saved["runs"]) == 4
    for name in ("step_3", "step_2", "step_1", "random"):  # the printed table
        assert name in result.stdout

    folder = run_mars("ratings", str(runs))  # a folder of runs: every arena run inside
    assert folder.returncode == 0, folder.stderr
    table = json.loads((runs / "ratings.json").read_text())["games"]["tic_tac_toe"]
    assert table["games"] == 160 and table["players"][0]["player"] == "/ck/step_3"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "missing", "no such run: "),
        (lambda root: root / "not-runs", "is not a run directory and holds none"),
        (lambda root: root / "eval-only", "no arena runs in "),
        (lambda root: root / "cooperative", "no rated games in these records (1 cooperative"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, make, message: str) -> None:
    (tmp_path / "not-runs").mkdir()
    eval_run = RunDir.resolve(out=None, run_dir=tmp_path / "eval-only", kind="eval", slug="x")
    eval_run.start(command=["mars", "eval"], config={})
    hanabi = [record("mini_hanabi", "first", "llm", "random", [2.0, 2.0])]
    _arena_run(tmp_path / "cooperative", hanabi, model="m")
    result = run_mars("ratings", str(make(tmp_path)))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_rate_refuses_an_anchor_that_never_played() -> None:
    collected = Collected([Match("tic_tac_toe", "a", "b", 1.0)])
    with pytest.raises(MarsError, match="--anchor 'z' played no rated game"):
        rate(collected, anchor="z")
