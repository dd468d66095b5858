"""The figures a learning-curve row keeps from each sub-run's summary, and the ratings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.summaries import (
    ArenaSummary,
    EvalSummary,
    ExploitabilitySummary,
    SeatFigures,
    SuiteFigures,
    fields,
)
from mars.orchestration.loop.checkpoints import Checkpoint
from mars.orchestration.loop.spec import RatingItem, slug

SEAT_FIGURES = fields(
    SeatFigures,
    "n", "win", "draw", "loss", "normalized_return", "normalized_return_ci", "mean_return",
    "invalid_rate", "errors",
)  # fmt: skip
SUITE_FIGURES = fields(
    SuiteFigures, "n", "correct", "accuracy", "ci95", "extraction_failure_rate", "errors"
)
EXPLOIT_FIGURES = fields(
    ExploitabilitySummary,
    "exploitability", "ci95", "nash_conv", "nash_conv_ci95", "invalid_rate", "samples", "states",
    "replies", "temperature", "action_shares",
)  # fmt: skip


def arena_figures(summary: ArenaSummary) -> dict[str, Any]:
    """Per seat: n, win/draw/loss, normalized return with its interval, invalid rate, errors."""
    seats = summary.get("seats", {})
    return {
        "seats": {seat: {k: stats.get(k) for k in SEAT_FIGURES} for seat, stats in seats.items()}
    }


def suite_figures(summary: EvalSummary, suite: str) -> dict[str, Any]:
    stats = summary.get("suites", {}).get(suite, {})
    return {key: stats.get(key) for key in SUITE_FIGURES}


def exploit_figures(summary: ExploitabilitySummary) -> dict[str, Any]:
    return {key: summary.get(key) for key in EXPLOIT_FIGURES}


def rating_opponents(item: RatingItem, earlier: list[Checkpoint]) -> list[tuple[str, str]]:
    """(opponent, run-dir suffix) of each match a rating item plays: its bots, then the latest
    `previous` earlier checkpoints as `llm:FOLDER` (each served by the sub-command)."""
    matches = [(bot, slug(bot)) for bot in item.bots]
    latest = earlier[-item.previous :] if item.previous else []
    matches += [(f"llm:{c.path.resolve()}", f"step_{c.step}") for c in latest]
    return matches


def loop_matches(loop_dir: Path, game: str) -> Any:
    """Every rated game of `game` in the loop's arena sub-runs (`games.ratings.Collected`)."""
    from core.runstore import list_runs
    from games.ratings import Collected, collect_matches

    collected = Collected()
    for sub_run in list_runs(loop_dir):
        if sub_run.kind == "arena":
            model = sub_run.info().model
            collect_matches(sub_run.records(), model=model, games={game}, into=collected)
    return collected


def rating_figures(item: RatingItem, label: str, loop_dir: Path) -> dict[str, Any]:
    """The checkpoint's rating over every game of `item.game` the loop has played so far."""
    from games.ratings import rate_game

    matches = loop_matches(loop_dir, item.game).matches
    players = {m.a for m in matches} | {m.b for m in matches}
    if label not in players:
        return {"error": f"rating failed: {label} has no rated {item.game} game"}
    anchor = item.anchor or (item.bots[0] if item.bots else None)
    if anchor not in players:
        anchor = None  # its games failed: the field's mean instead
    fit = rate_game(matches, bootstrap=item.bootstrap, seed=0, anchor=anchor)
    mine = next(row for row in fit["players"] if row["player"] == label)
    return {
        "rating": mine["rating"],
        "ci95": mine["ci95"],
        "rank": mine["rank"],
        "players": len(fit["players"]),
        "games": mine["games"],
        "score": mine["score"],
        "anchor": anchor,
        "all_games": fit["games"],
        "table": [
            {key: row[key] for key in ("player", "rating", "ci95", "games", "score")}
            for row in fit["players"]
        ],
    }
