"""Arena summaries and records as tables: per-seat results, outcomes, episodes, replays."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.stats import wilson_ci
from core.summaries import SeatFigures, fields
from dashboard.data.files import SEATS
from dashboard.data.values import as_float, as_text


def arena_summaries(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Arena summaries in a summary.json: one at top level, or a list / map of them."""
    if not isinstance(summary, dict):
        return []
    if isinstance(summary.get("seats"), dict):
        return [summary]
    for key in ("arenas", "matchups", "results", "games"):
        value = summary.get(key)
        if isinstance(value, list):
            return [s for s in value if isinstance(s, dict) and isinstance(s.get("seats"), dict)]
        if isinstance(value, dict):
            found = []
            for name, item in value.items():
                if isinstance(item, dict) and isinstance(item.get("seats"), dict):
                    found.append({"game": name, **item})
            if found:
                return found
    return []


SEAT_FIGURES = fields(
    SeatFigures, "n", "win", "draw", "loss", "mean_return", "normalized_return", "invalid_rate"
)
SEAT_COLUMNS = ["run", "game", "player", "opponent", "seat", *SEAT_FIGURES]


def seat_table(summaries_by_run: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    rows = []
    for run, summaries in summaries_by_run.items():
        for summary in summaries:
            for seat, cell in (summary.get("seats") or {}).items():
                if not isinstance(cell, dict):
                    continue
                rows.append(
                    {
                        "run": run,
                        "game": summary.get("game"),
                        "player": summary.get("player"),
                        "opponent": summary.get("opponent"),
                        "seat": seat,
                        **{k: cell.get(k) for k in SEAT_FIGURES},
                    }
                )
    return pd.DataFrame(rows, columns=SEAT_COLUMNS)


def _seat_index(record: dict[str, Any]) -> int | None:
    seat = record.get("seat")
    if seat in SEATS:
        return SEATS.index(seat)
    if isinstance(seat, int) and seat in (0, 1):
        return seat
    return None


def _pick(values: Any, index: int) -> Any:
    if isinstance(values, list) and 0 <= index < len(values):
        return values[index]
    return None


SELF_PLAY = "self-play"


def _player_seats(
    records: Iterable[dict[str, Any]],
) -> Iterable[tuple[dict[str, Any], int, str]]:
    """Each record with the seat of the player it is about and its opponent: the arena's player
    seat, or every seat of a self-play episode (one player in all seats: a training run's)."""
    for record in records:
        seat = _seat_index(record)
        if seat is not None:
            yield record, seat, str(record.get("opponent", "-"))
            continue
        players = record.get("players")
        if isinstance(players, list) and len(players) == 2 and len(set(map(str, players))) == 1:
            yield record, 0, SELF_PLAY
            yield record, 1, SELF_PLAY


def arena_outcomes(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """From episode records: per game, opponent and seat of the player, the outcome rates."""
    tallies: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for record, seat, opponent in _player_seats(records):
        key = (str(record.get("game", "-")), opponent, SEATS[seat])
        tally = tallies[key]
        if record.get("error"):
            tally["errors"] += 1
            continue
        tally["n"] += 1
        outcome = _pick(record.get("outcomes"), seat)
        if outcome in ("win", "draw", "loss"):
            tally[outcome] += 1
        value = as_float(_pick(record.get("returns"), seat))
        if value is not None:
            tally["return_sum"] += value
            tally["returns"] += 1
        tally["model_turns"] += as_float(_pick(record.get("model_turns"), seat)) or 0
        tally["invalid_turns"] += as_float(_pick(record.get("invalid_turns"), seat)) or 0
    rows = []
    for (game, opponent, seat), t in sorted(tallies.items()):
        n = int(t["n"])
        row: dict[str, Any] = {"game": game, "opponent": opponent, "seat": seat, "n": n}
        for outcome in ("win", "draw", "loss"):
            row[outcome] = t[outcome] / n if n else None
        low, high = wilson_ci(int(t["win"]), n)
        row["win_ci_low"], row["win_ci_high"] = (low, high) if n else (None, None)
        row["mean_return"] = t["return_sum"] / t["returns"] if t["returns"] else None
        row["invalid_rate"] = t["invalid_turns"] / t["model_turns"] if t["model_turns"] else None
        row["errors"] = int(t["errors"])
        rows.append(row)
    columns = ["game", "opponent", "seat", "n", "win", "draw", "loss", "win_ci_low"]
    columns += ["win_ci_high", "mean_return", "invalid_rate", "errors"]
    return pd.DataFrame(rows, columns=columns)


def episode_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for index, record in enumerate(records):
        seat = _seat_index(record)
        rows.append(
            {
                "game": str(record.get("game", "-")),
                "seed": record.get("seed"),
                "seat": SEATS[seat] if seat is not None else "-",
                "opponent": str(record.get("opponent", "-")),
                "outcome": _pick(record.get("outcomes"), seat) if seat is not None else None,
                "return": _pick(record.get("returns"), seat) if seat is not None else None,
                "turns": len(record.get("turns") or []),
                "invalid": bool(record.get("invalid")),
                "error": record.get("error"),
                "step": record.get("step"),  # a training run's episodes: the step that played it
                "row": index,
            }
        )
    columns = ["game", "seed", "seat", "opponent", "outcome", "return", "turns", "invalid"]
    return pd.DataFrame(rows, columns=[*columns, "error", "step", "row"])


@dataclass
class TurnView:
    index: int
    seat: int | None
    seat_label: str
    turn: int | None
    state: str  # what the seat was shown this turn (the last user message of its prompt)
    prompt: list[dict[str, str]]
    reasoning: str
    reply: str
    action: str | None
    legal: bool | None
    reward: float | None
    usage: dict[str, Any]
    error: str | None
    is_model: bool


def _prompt_messages(prompt: Any) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        return [
            {"role": str(m.get("role", "-")), "content": str(m.get("content", ""))}
            for m in prompt
            if isinstance(m, dict)
        ]
    return []


def replay_turns(record: dict[str, Any]) -> list[TurnView]:
    """The turns of an arena episode in order, with each seat named by who sat there."""
    players = record.get("players") if isinstance(record.get("players"), list) else []
    player_seat = _seat_index(record)
    views = []
    for index, turn in enumerate(record.get("turns") or []):
        if not isinstance(turn, dict):
            continue
        seat = turn.get("seat") if isinstance(turn.get("seat"), int) else None
        label = SEATS[seat] if seat in (0, 1) else "-"
        if seat is not None and seat < len(players):
            label += f" ({players[seat]})"
        if seat is not None and seat == player_seat:
            label += " [player]"
        prompt = _prompt_messages(turn.get("prompt"))
        users = [m["content"] for m in prompt if m["role"] == "user"]
        views.append(
            TurnView(
                index=index,
                seat=seat,
                seat_label=label,
                turn=turn.get("turn") if isinstance(turn.get("turn"), int) else None,
                state=users[-1] if users else "",
                prompt=prompt,
                reasoning=str(turn.get("reasoning") or ""),
                reply=str(turn.get("reply") or ""),
                action=as_text(turn.get("action")),
                legal=turn.get("legal") if isinstance(turn.get("legal"), bool) else None,
                reward=as_float(turn.get("reward")),
                usage=turn.get("usage") if isinstance(turn.get("usage"), dict) else {},
                error=as_text(turn.get("error")),
                is_model="usage" in turn or "reply" in turn,
            )
        )
    return views
