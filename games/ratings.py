"""Ratings of any players (checkpoints, models, bots) from arena records: Bradley-Terry on the
Elo scale, with 95% intervals.

Each arena record is one game between the record's player and opponent (`player_id` /
`opponent_id`: the model behind `llm`, else the player string). Its result for the player is the
sign of the difference of the two game-scale returns: a win, a draw (equal returns) or a loss. So a
forfeit by an invalid move is a loss for the offender (its return is below the other's), and a
poker hand is won by whoever took chips. Cooperative games (Hanabi: one shared score), games a
player played against itself, and errored episodes carry no comparison and are left out.

The model: P(a beats b) = 1 / (1 + 10^((R_b - R_a) / 400)), with a draw counted as half a win
and half a loss. It is fitted by maximum a posteriori (Newton's method) under a normal prior of
`prior_sd` Elo points on each rating, which keeps an unbeaten (or winless) player finite and
barely moves players with a few dozen mixed results. Ratings are then shifted so their mean is
`base` (or the `anchor` player sits at `base`).

Intervals, relative to the field's mean or to the anchor: by default the posterior's (the normal
approximation at the MAP: the inverse Hessian), which stays honest when every game of a player
ended the same way; with `bootstrap` > 0 the 2.5-97.5 percentiles over refits on games resampled
with replacement, which assume less about the model but collapse to a point for such a player.

Why not an online rating (Elo updates, TrueSkill/OpenSkill): those depend on the order the games
are read in, and their sigma describes that sequential filter rather than the games; checkpoints
are fixed players, for which a batch fit over all games is the right estimate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import MarsError

POINTS_PER_LOGIT = 400.0 / math.log(10.0)  # Elo points per unit of log-odds
MODEL_PLAYERS = ("llm", "self")
_MAX_NEWTON_STEPS = 100


@dataclass(frozen=True)
class Match:
    """One game: `a` against `b`, `score` a's result (1 win, 0.5 draw, 0 loss)."""

    game: str
    a: str
    b: str
    score: float


@dataclass
class Collected:
    """The matches read from records, and what was left out (and why)."""

    matches: list[Match] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def _cooperative(game: str) -> bool | None:
    from games.spec import get_game

    try:
        return get_game(game).cooperative
    except MarsError:
        return None


def record_players(record: dict[str, Any], model: str | None) -> tuple[str, str] | None:
    """(player, opponent) of an arena record, as rated: `player_id`/`opponent_id` when recorded;
    in older records a model player (`llm`, `self`) is `model`, the run's model (else "llm")."""
    ids = []
    for key in ("player", "opponent"):
        given = record.get(f"{key}_id")
        if isinstance(given, str) and given:
            ids.append(given)
            continue
        name = record.get(key)
        if not isinstance(name, str) or not name:
            return None
        ids.append((model or "llm") if name in MODEL_PLAYERS else name)
    return ids[0], ids[1]


def collect_matches(
    records: Iterable[dict[str, Any]],
    *,
    model: str | None = None,
    games: set[str] | None = None,
    into: Collected | None = None,
) -> Collected:
    """Matches from one run's arena records (`model`: the run's model, for older records)."""
    out = into or Collected()
    cooperative: dict[str, bool | None] = {}
    for record in records:
        game = record.get("game")
        if not isinstance(game, str) or (games is not None and game not in games):
            continue
        if record.get("kind") == "selfplay":
            out.skipped["self-play records"] += 1
            continue
        if record.get("error"):
            out.skipped["errored episodes"] += 1
            continue
        if game not in cooperative:
            cooperative[game] = _cooperative(game)
        if cooperative[game] is None:
            out.skipped[f"unknown game {game}"] += 1
            continue
        if cooperative[game]:
            out.skipped["cooperative games"] += 1
            continue
        players = record_players(record, model)
        returns = record.get("returns")
        seat = {"first": 0, "second": 1}.get(record.get("seat"))  # type: ignore[arg-type]
        if players is None or seat is None or not isinstance(returns, list) or len(returns) != 2:
            out.skipped["damaged records"] += 1
            continue
        if players[0] == players[1]:
            out.skipped["games against itself"] += 1
            continue
        mine, theirs = returns[seat], returns[1 - seat]
        if not isinstance(mine, int | float) or not isinstance(theirs, int | float):
            out.skipped["damaged records"] += 1
            continue
        score = 1.0 if mine > theirs else 0.0 if mine < theirs else 0.5
        out.matches.append(Match(game, players[0], players[1], score))
    return out


@dataclass(frozen=True)
class _Pairs:
    """Matches of one game aggregated per unordered pair of players (i < j)."""

    players: list[str]
    first: np.ndarray  # (K,) index i of each pair
    second: np.ndarray  # (K,) index j
    match_pair: np.ndarray  # (M,) the pair of each match
    match_score: np.ndarray  # (M,) the score of player i in each match


def _pairs(matches: list[Match]) -> _Pairs:
    players = sorted({m.a for m in matches} | {m.b for m in matches})
    index = {name: k for k, name in enumerate(players)}
    pair_ids: dict[tuple[int, int], int] = {}
    match_pair = np.empty(len(matches), dtype=np.int64)
    match_score = np.empty(len(matches), dtype=np.float64)
    for k, match in enumerate(matches):
        i, j, score = index[match.a], index[match.b], match.score
        if i > j:
            i, j, score = j, i, 1.0 - score
        match_pair[k] = pair_ids.setdefault((i, j), len(pair_ids))
        match_score[k] = score
    ordered = sorted(pair_ids, key=pair_ids.__getitem__)
    first = np.array([i for i, _ in ordered], dtype=np.int64)
    second = np.array([j for _, j in ordered], dtype=np.int64)
    return _Pairs(players, first, second, match_pair, match_score)


def _fit(
    pairs: _Pairs, games: np.ndarray, scores: np.ndarray, prior_sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """MAP log-strengths (logits) given per-pair game counts and scores of the pair's first, and
    the negative Hessian of the log posterior there (the posterior's precision matrix)."""
    n = len(pairs.players)
    precision = 1.0 / (prior_sd / POINTS_PER_LOGIT) ** 2
    i, j = pairs.first, pairs.second
    theta = np.zeros(n)

    def objective(values: np.ndarray) -> float:
        diff = values[i] - values[j]
        # log sigma(x) = -log(1 + e^-x), computed stably with logaddexp
        loglik = -(scores * np.logaddexp(0.0, -diff) + (games - scores) * np.logaddexp(0.0, diff))
        return float(loglik.sum() - 0.5 * precision * np.dot(values, values))

    def precision_matrix(values: np.ndarray) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-(values[i] - values[j])))
        weight = games * p * (1.0 - p)
        hessian = np.diag(np.bincount(i, weight, n) + np.bincount(j, weight, n) + precision)
        np.add.at(hessian, (i, j), -weight)
        np.add.at(hessian, (j, i), -weight)
        return hessian

    current = objective(theta)
    for _ in range(_MAX_NEWTON_STEPS):
        expected = games / (1.0 + np.exp(-(theta[i] - theta[j])))
        residual = scores - expected  # d loglik / d theta_i; minus that for theta_j
        gradient = np.bincount(i, residual, n) - np.bincount(j, residual, n) - precision * theta
        step = np.linalg.solve(precision_matrix(theta), gradient)
        scale = 1.0
        for _halving in range(30):  # the objective is concave: a short enough step improves it
            candidate = theta + scale * step
            value = objective(candidate)
            if value >= current - 1e-12:
                break
            scale /= 2.0
        theta, current = candidate, value
        if float(np.max(np.abs(scale * step))) < 1e-9:
            break
    return theta, precision_matrix(theta)


def _elo(theta: np.ndarray, base: float, anchor: int | None) -> np.ndarray:
    zero = theta[anchor] if anchor is not None else float(np.mean(theta))
    return base + POINTS_PER_LOGIT * (theta - zero)


def _components(pairs: _Pairs) -> int:
    """How many groups of players no game connects (more than one: not comparable across)."""
    parent = list(range(len(pairs.players)))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for i, j in zip(pairs.first.tolist(), pairs.second.tolist(), strict=True):
        parent[root(i)] = root(j)
    return len({root(k) for k in range(len(parent))})


def _posterior_sd(precision: np.ndarray, anchor: int | None) -> np.ndarray:
    """Posterior sd (logits) of each rating as reported: relative to the anchor, or to the mean
    (the Laplace approximation: the inverse of the precision matrix at the MAP)."""
    n = len(precision)
    covariance = np.linalg.inv(precision)
    contrast = np.eye(n)  # row p: the rating of p minus the reference point
    if anchor is not None:
        contrast[:, anchor] -= 1.0
    else:
        contrast -= 1.0 / n
    variance = np.einsum("pi,ij,pj->p", contrast, covariance, contrast)
    return np.sqrt(np.clip(variance, 0.0, None))


def _bootstrap_intervals(
    pairs: _Pairs,
    resamples: int,
    seed: int,
    prior_sd: float,
    base: float,
    anchor: int | None,
) -> list[list[float] | list[None]]:
    """Per player, the 2.5-97.5 percentiles of its rating over refits on resampled games."""
    n_players, n_matches, k = len(pairs.players), len(pairs.match_pair), len(pairs.first)
    samples = np.full((resamples, n_players), np.nan)
    rng = np.random.default_rng(seed)
    for b in range(resamples):
        drawn = rng.integers(0, n_matches, n_matches)
        pair_of = pairs.match_pair[drawn]
        games = np.bincount(pair_of, minlength=k).astype(np.float64)
        scores = np.bincount(pair_of, pairs.match_score[drawn], k)
        played = np.zeros(n_players, dtype=bool)
        played[pairs.first[games > 0]] = True
        played[pairs.second[games > 0]] = True
        if anchor is not None and not played[anchor]:
            continue  # no reference point in this resample
        theta, _ = _fit(pairs, games, scores, prior_sd)
        zero = theta[anchor] if anchor is not None else float(np.mean(theta[played]))
        samples[b, played] = base + POINTS_PER_LOGIT * (theta[played] - zero)
    intervals: list[list[float] | list[None]] = []
    for p in range(n_players):
        column = samples[:, p][~np.isnan(samples[:, p])]
        if len(column):
            intervals.append(
                [float(np.percentile(column, 2.5)), float(np.percentile(column, 97.5))]
            )
        else:
            intervals.append([None, None])
    return intervals


def rate_game(
    matches: list[Match],
    *,
    bootstrap: int = 0,
    seed: int = 0,
    prior_sd: float = 400.0,
    base: float = 1000.0,
    anchor: str | None = None,
) -> dict[str, Any]:
    """Ratings of the players of one game's matches, best first, with 95% intervals: the
    posterior's (normal approximation), or with `bootstrap` > 0 the percentile bootstrap."""
    if not matches:
        raise MarsError("no games to rate")
    if prior_sd <= 0:
        raise MarsError("--prior-sd must be positive")
    pairs = _pairs(matches)
    anchor_index = None
    if anchor is not None:
        if anchor not in pairs.players:
            raise MarsError(f"--anchor {anchor!r} played no game here; players: {pairs.players}")
        anchor_index = pairs.players.index(anchor)
    k = len(pairs.first)
    games = np.bincount(pairs.match_pair, minlength=k).astype(np.float64)
    scores = np.bincount(pairs.match_pair, pairs.match_score, k)
    theta, precision = _fit(pairs, games, scores, prior_sd)
    ratings = _elo(theta, base, anchor_index)
    sd = POINTS_PER_LOGIT * _posterior_sd(precision, anchor_index)
    if bootstrap > 0:
        intervals = _bootstrap_intervals(pairs, bootstrap, seed, prior_sd, base, anchor_index)
    else:
        intervals = [
            [float(r - 1.96 * e), float(r + 1.96 * e)] for r, e in zip(ratings, sd, strict=True)
        ]

    tallies: dict[str, Counter[str]] = {name: Counter() for name in pairs.players}
    flipped = {"wins": "losses", "losses": "wins", "draws": "draws"}
    for match in matches:
        outcome = {1.0: "wins", 0.5: "draws", 0.0: "losses"}[match.score]
        tallies[match.a][outcome] += 1
        tallies[match.b][flipped[outcome]] += 1
    rows = []
    for p, name in enumerate(pairs.players):
        tally = tallies[name]
        played = tally["wins"] + tally["draws"] + tally["losses"]
        rows.append(
            {
                "player": name,
                "rating": float(ratings[p]),
                "ci95": intervals[p],
                "sd": float(sd[p]),
                "games": played,
                "wins": tally["wins"],
                "draws": tally["draws"],
                "losses": tally["losses"],
                "score": (tally["wins"] + 0.5 * tally["draws"]) / played,
            }
        )
    rows.sort(key=lambda row: -row["rating"])
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    names = pairs.players
    return {
        "players": rows,
        "pairs": [
            {"a": names[i], "b": names[j], "games": int(games[q]), "score_a": float(scores[q])}
            for q, (i, j) in enumerate(
                zip(pairs.first.tolist(), pairs.second.tolist(), strict=True)
            )
        ],
        "games": len(matches),
        "connected": _components(pairs) == 1,
    }


def rate(
    collected: Collected,
    *,
    bootstrap: int = 0,
    seed: int = 0,
    prior_sd: float = 400.0,
    base: float = 1000.0,
    anchor: str | None = None,
) -> dict[str, Any]:
    """Ratings per game (a player's skill at one game says little about another)."""
    if bootstrap < 0:
        raise MarsError("--bootstrap must be 0 or more")
    by_game: dict[str, list[Match]] = {}
    for match in collected.matches:
        by_game.setdefault(match.game, []).append(match)
    if not by_game:
        raise MarsError("no rated games in these records (" + _skipped_text(collected) + ")")
    if anchor is not None and all(anchor not in (m.a, m.b) for m in collected.matches):
        players = sorted({m.a for m in collected.matches} | {m.b for m in collected.matches})
        raise MarsError(f"--anchor {anchor!r} played no rated game; players: {', '.join(players)}")
    results = {}
    for game in sorted(by_game):
        game_anchor = anchor
        if anchor is not None and all(anchor not in (m.a, m.b) for m in by_game[game]):
            game_anchor = None  # the anchor did not play this game: centre it on the mean
        results[game] = rate_game(
            by_game[game],
            bootstrap=bootstrap,
            seed=seed,
            prior_sd=prior_sd,
            base=base,
            anchor=game_anchor,
        ) | {"anchor": game_anchor}
    return {
        "method": "bradley-terry",
        "scale": {"base": base, "points_per_logit": POINTS_PER_LOGIT},
        "prior_sd": prior_sd,
        "interval": (
            f"95% percentile bootstrap over games ({bootstrap} resamples, seed {seed})"
            if bootstrap
            else "95% posterior interval (normal approximation at the MAP fit)"
        ),
        "bootstrap": bootstrap,
        "seed": seed,
        "skipped": dict(collected.skipped),
        "games": results,
    }


def _skipped_text(collected: Collected) -> str:
    if not collected.skipped:
        return "no arena records"
    return ", ".join(f"{count} {why}" for why, count in sorted(collected.skipped.items()))
