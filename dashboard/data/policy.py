"""A poker policy over training against the equilibrium: its states grouped by player and
history with each checkpoint's probability, the equilibrium range beside it and the deviation;
OpenSpiel's best response per state; exploitability from the recorded shares; run A minus run B.
NashConv and the best responses are the game layer's (`games.solvers`, imported when first needed).

The input is `action_share_table` of one run and series (a game in metrics.jsonl, an item of a
loop's curve): one row per (x, state, action) with the recorded probability.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dashboard.data.equilibrium import (
    AGGRESSIVE,
    KUHN,
    KUHN_ALPHA,
    LEDUC,
    RANKS,
    Reference,
    Table,
    deviation,
    information_states,
    reference,
)

LEDUC_ACTIONS = ("FOLD", "CALL", "RAISE")
LONG_COLUMNS = ["label", "state", "action", "x", "share", "low", "high", "deviation", "flagged"]


@dataclass(frozen=True)
class PolicyRow:
    """One line of the policy grid: a state and the action whose probability it shows."""

    label: str  # the heatmap's: "P0 pb Q", "card J · RAISE"
    state: str  # the state's title in the metrics: "Q pb", "card J"
    action: str  # the label without brackets: BET, RAISE
    player: str
    history: str
    card: str
    move: str  # what the action means there: bet, call, raise, fold


@dataclass
class PolicyView:
    game: str | None
    rows: list[PolicyRow]
    long: pd.DataFrame  # LONG_COLUMNS, one line per (row, x) recorded
    reference: Reference | None
    xs: list[Any] = field(default_factory=list)  # the checkpoints, in order


def _kuhn_rows() -> list[PolicyRow]:
    order = {"p": 0, "b": 1}
    states = sorted(
        information_states(KUHN),
        key=lambda s: (s.seat, len(s.history), [order[m] for m in s.history], RANKS.index(s.card)),
    )
    return [
        PolicyRow(
            label=f"P{s.seat} {s.history or '-'} {s.card}",
            state=s.title,
            action="BET",
            player=f"P{s.seat}",
            history=s.history or "-",
            card=s.card,
            move="call" if s.history.endswith("b") else "bet",
        )
        for s in states
    ]


def _leduc_rows(present: Mapping[str, set[str]]) -> list[PolicyRow]:
    """The trainer's per-card groups, then any per-state title recorded, by seat and tree order."""
    rows = [
        PolicyRow(f"card {c} · {a}", f"card {c}", a, "both", "all (mean)", c, a.lower())
        for c in RANKS
        for a in LEDUC_ACTIONS
    ]
    states = sorted(
        (s for s in information_states(LEDUC) if s.title in present), key=lambda s: s.seat
    )
    for s in states:
        for action in s.labels:
            label = f"P{s.seat} {s.history} {s.card} · {action}"
            rows.append(
                PolicyRow(label, s.title, action, f"P{s.seat}", s.history, s.card, action.lower())
            )
    return rows


def policy_rows(game: str | None, present: Mapping[str, set[str]]) -> list[PolicyRow]:
    """Every row of the grid: all of a known game's states (recorded or not), then any other
    recorded (state, action) in name order. `present`: state title -> actions recorded."""
    if game == KUHN:
        rows = _kuhn_rows()
    elif game == LEDUC:
        rows = _leduc_rows(present)
    else:
        rows = []
    titles = {r.state for r in rows}
    for state in sorted(present):
        for action in sorted(present[state]):
            if state not in titles:
                rows.append(
                    PolicyRow(f"{state} · {action}", state, action, "-", "-", "-", action.lower())
                )
    return rows


def policy_view(shares: pd.DataFrame, game: str | None, slack: float = 0.0) -> PolicyView:
    """Each row's recorded probability at every x with its equilibrium range and deviation;
    `flagged` when the deviation exceeds `slack` (sampling noise one is ready to ignore)."""
    present: dict[str, set[str]] = {}
    for state, action in zip(shares["state"], shares["action"], strict=True):
        present.setdefault(state, set()).add(action)
    rows = policy_rows(game, present)
    ref = reference(game) if game is not None else None
    recorded = {
        (s, a, _plain(x)): float(v)
        for s, a, x, v in zip(
            shares["state"], shares["action"], shares["x"], shares["share"], strict=True
        )
    }
    xs = sorted({_plain(x) for x in shares["x"]}, key=_sort_key)
    lines = []
    for row in rows:
        bounds = ref.ranges.get(row.state, {}).get(row.action) if ref else None
        for x in xs:
            share = recorded.get((row.state, row.action, x))
            if share is None:
                continue
            gap = deviation(share, bounds) if bounds else None
            lines.append(
                {
                    "label": row.label,
                    "state": row.state,
                    "action": row.action,
                    "x": x,
                    "share": share,
                    "low": bounds[0] if bounds else None,
                    "high": bounds[1] if bounds else None,
                    "deviation": gap,
                    "flagged": gap is not None and abs(gap) > slack,
                }
            )
    return PolicyView(game, rows, pd.DataFrame(lines, columns=LONG_COLUMNS), ref, xs)


def _plain(x: Any) -> Any:
    """A checkpoint as a plain Python value, a whole number as an int (iterrows hands steps
    over as floats)."""
    x = x.item() if hasattr(x, "item") else x
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _sort_key(x: Any) -> tuple[int, Any]:
    return (0, x) if isinstance(x, (int, float)) else (1, str(x))


def x_text(x: Any) -> str:
    """A checkpoint as a column name: 50.0 reads 50."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def policy_grid(view: PolicyView) -> pd.DataFrame:
    """One line per row: who, where, the equilibrium range, each x's probability, the last
    deviation and the checkpoints where the row was flagged."""
    by_row = {label: part for label, part in view.long.groupby("label", sort=False)}
    lines = []
    for row in view.rows:
        bounds = (
            view.reference.ranges.get(row.state, {}).get(row.action) if view.reference else None
        )
        line: dict[str, Any] = {
            "player": row.player,
            "history": row.history,
            "card": row.card,
            "move": row.move,
            "Nash low": bounds[0] if bounds else None,
            "Nash high": bounds[1] if bounds else None,
        }
        part = by_row.get(row.label)
        shares = {} if part is None else dict(zip(part["x"], part["share"], strict=True))
        for x in view.xs:
            line[x_text(x)] = shares.get(x)
        last = None if part is None else part.iloc[-1]
        line["deviation (last)"] = None if last is None else last["deviation"]
        flagged = [] if part is None else [x_text(x) for x in part.loc[part["flagged"], "x"]]
        line["outside at"] = ", ".join(flagged)
        lines.append(line)
    return pd.DataFrame(lines)


def last_deviations(view: PolicyView) -> list[dict[str, Any]]:
    """The rows flagged at the last checkpoint each was recorded at, largest deviation first."""
    found = []
    for label, part in view.long.groupby("label", sort=False):
        last = part.iloc[-1]
        if last["flagged"]:
            found.append(
                {
                    "label": label,
                    "x": last["x"],
                    "share": last["share"],
                    "low": last["low"],
                    "high": last["high"],
                    "deviation": last["deviation"],
                }
            )
    return sorted(found, key=lambda d: -abs(d["deviation"]))


def kuhn_alphas(view: PolicyView) -> dict[str, float]:
    """The alpha that player 0's bet with J, with K, and call with Q after pass-bet each imply at
    their last checkpoint (Kuhn; {} for another game or a state not recorded)."""
    if view.game != KUHN:
        return {}
    last = {
        part.iloc[-1]["state"]: float(part.iloc[-1]["share"])
        for _, part in view.long.groupby("label", sort=False)
    }
    return {title: KUHN_ALPHA[title](last[title]) for title in KUHN_ALPHA if title in last}


def policy_table_at(shares: pd.DataFrame, game: str, x: Any) -> Table | None:
    """The OpenSpiel policy recorded at checkpoint x, or None when a state of the game is
    missing (a game recorded per private card cannot be rebuilt). A state's shares are
    renormalised; one with no mass is played uniformly."""
    at = shares[shares["x"] == x]
    found: dict[str, dict[str, float]] = {}
    for state, action, share in zip(at["state"], at["action"], at["share"], strict=True):
        found.setdefault(state, {})[action] = float(share)
    table: Table = {}
    for state in information_states(game):
        recorded = found.get(state.title)
        if recorded is None:
            return None
        mass = [max(0.0, recorded.get(label, 0.0)) for label in state.labels]
        total = sum(mass)
        probabilities = [m / total for m in mass] if total > 0 else [1 / len(mass)] * len(mass)
        table[state.key] = list(zip(state.actions, probabilities, strict=True))
    return table


def exploitability_by_x(shares: pd.DataFrame, game: str) -> pd.DataFrame:
    """OpenSpiel's exploitability (NashConv / 2) of the policy at every checkpoint whose
    recorded shares cover all of the game's states."""
    from games.solvers import nash_conv

    lines = []
    for x in sorted(set(shares["x"]), key=_sort_key):
        table = policy_table_at(shares, game, x)
        if table is not None:
            value = nash_conv(game, table)
            lines.append({"x": x, "exploitability": value / 2, "nash_conv": value})
    return pd.DataFrame(lines, columns=["x", "exploitability", "nash_conv"])


BEST_RESPONSE_COLUMNS = [
    "state",
    "player",
    "history",
    "card",
    "policy",
    "best response",
    "value of best response",
    "value of policy",
    "reach",
    "gain",
]


def best_response_by_state(game: str, table: Table) -> pd.DataFrame:
    """Per information state (named as in the grid: player, history, card), OpenSpiel's best
    response of that state's player to the other seat's policy (`games.solvers.best_responses`):
    the policy's probabilities, the best action, the counterfactual value (chance and the other
    seat's reach) of the best action and of the policy's own mix there, both followed by best
    play, and `gain` = the policy's own reach x their difference. A seat's gains add up to what
    its best response wins over the policy, so all gains add up to NashConv."""
    from games.solvers import best_responses

    states = {s.key: s for s in information_states(game)}
    lines = []
    for response in best_responses(game, table):
        info = states[response.key]
        mix = dict(table[response.key])
        lines.append(
            {
                "state": f"P{response.seat} {info.history or '-'} {info.card}",
                "player": f"P{response.seat}",
                "history": info.history or "-",
                "card": info.card,
                "policy": ", ".join(
                    f"{label} {mix[a]:.2f}"
                    for a, label in zip(info.actions, info.labels, strict=True)
                ),
                "best response": info.labels[info.actions.index(response.best)],
                "value of best response": response.values[response.best],
                "value of policy": response.policy_value,
                "reach": response.reach,
                "gain": response.gain,
            }
        )
    frame = pd.DataFrame(lines, columns=BEST_RESPONSE_COLUMNS)
    if game == KUHN:  # the grid's order
        order = {r.label: i for i, r in enumerate(_kuhn_rows())}
        frame = frame.sort_values("state", key=lambda s: s.map(order), kind="stable")
    return frame.reset_index(drop=True)


DIFFERENCE_COLUMNS = ["state", "player", "history", "card", "move", "A", "B", "A - B"]


def policy_difference(a: PolicyView, b: PolicyView) -> pd.DataFrame:
    """Per row, run A's and run B's probability at their last checkpoints, A - B, and each one's
    deviation from the equilibrium (None where a run did not record the row)."""
    last_a, last_b = _last_shares(a), _last_shares(b)
    lines = []
    for row in a.rows:
        share_a, share_b = last_a.get(row.label), last_b.get(row.label)
        if share_a is None and share_b is None:
            continue
        bounds = a.reference.ranges.get(row.state, {}).get(row.action) if a.reference else None
        lines.append(
            {
                "state": row.label,
                "player": row.player,
                "history": row.history,
                "card": row.card,
                "move": row.move,
                "A": share_a,
                "B": share_b,
                "A - B": None if share_a is None or share_b is None else share_a - share_b,
                "A deviation": _gap(share_a, bounds),
                "B deviation": _gap(share_b, bounds),
            }
        )
    return pd.DataFrame(lines, columns=[*DIFFERENCE_COLUMNS, "A deviation", "B deviation"])


def _last_shares(view: PolicyView) -> dict[str, float]:
    return {label: float(part.iloc[-1]["share"]) for label, part in view.long.groupby("label")}


def _gap(share: float | None, bounds: tuple[float, float] | None) -> float | None:
    if share is None or bounds is None or math.isnan(share):
        return None
    return deviation(share, bounds)


# The private card and, in Kuhn, the betting so far, as the project's game prompts show them to a
# seat: compact "card Q; bets: you PASS, opponent BET; ...", full "Your card: Q" (Leduc: "Your
# private card: Qh") and "Betting so far: you PASS, opponent BET". tests/test_dashboard_links.py
# checks every Kuhn and Leduc information state in both styles against the game's own prompts.
_CARD = re.compile(r"(?:^|\n)(?:card|Your card:|Your private card:) ([JQK])")
_BETS = re.compile(r"(?:\bbets:|Betting so far:) ([^;\n]*)")
_KUHN_MOVES = {"PASS": "p", "BET": "b"}


def policy_state_of(game: str | None, observation: str) -> str | None:
    """The policy panel's state title (as metrics.jsonl's `policy/<game>/<title>/...` names it)
    of what a seat was shown: Kuhn "Q pb" (the card, then the moves so far), Leduc the private
    card's group "card Q" (the trainer records Leduc per card). None for another game or a
    text that does not say (a clipped observation)."""
    card = _CARD.search(observation or "")
    if card is None or game not in (KUHN, LEDUC):
        return None
    if game == LEDUC:
        return f"card {card.group(1)}"
    bets = _BETS.search(observation)
    if bets is None:
        return None
    moves = re.findall(r"\b(PASS|BET)\b", bets.group(1))
    return f"{card.group(1)} {''.join(_KUHN_MOVES[m] for m in moves) or '-'}"


def policy_row_label(game: str | None, title: str) -> str:
    """The heatmap's row of a state title: Kuhn "Q pb" is "P0 pb Q" (the seat to act follows
    from the number of moves; no solver is loaded for it); Leduc's card groups and other titles
    are their own."""
    card, _, history = title.partition(" ")
    if game != KUHN or card not in RANKS or not history:
        return title
    moves = "" if history == "-" else history
    return f"P{len(moves) % 2} {history} {card}"


def aggressive_title(game: str | None) -> str:
    if game == KUHN:
        return "P(bet or call)"
    return f"P({AGGRESSIVE.get(game or '', 'action')})"
