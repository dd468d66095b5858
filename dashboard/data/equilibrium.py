"""The equilibrium a poker policy is held against: every information state of Kuhn and Leduc,
with the range of each action's probability over the game's Nash equilibria.

Kuhn poker has a one-parameter family of equilibria (Kuhn 1950): player 0 bets a Jack with
probability alpha in [0, 1/3], a King with 3 alpha, never a Queen, and after pass-bet calls with a
Queen with alpha + 1/3 (a Jack folds, a King calls); player 1's strategy is unique (after a pass
bet a King, bluff a Jack with 1/3, check a Queen; after a bet call a King, a Queen with 1/3, fold a
Jack). Each state's range is the interval its probability sweeps as alpha runs over [0, 1/3].

Leduc's equilibria have no closed form: one is computed with OpenSpiel's CFR+ solver
(`games.solvers`, the game layer's one module of solvers), once per process, and each probability
stands for the interval of +-`LEDUC_TOLERANCE` around it (another equilibrium may differ by more:
a Leduc flag is a pointer, not a proof).

`games.solvers` (and OpenSpiel with it) is imported inside the functions, so importing the
dashboard does not load it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

KUHN = "kuhn_poker"
LEDUC = "leduc_poker"
GAMES = (KUHN, LEDUC)
RANKS = "JQK"
ALPHA_MAX = 1 / 3
# CFR+ iterations for Leduc: about 2 s on one core, exploitability 0.013 (0.034 after 50 and 0.005
# after 200 iterations).
LEDUC_CFR_ITERATIONS = 100
LEDUC_TOLERANCE = 0.05
ROUNDING = 1e-9
# The aggressive move whose probability the heatmap colours: Kuhn's BET is a bet, or after a
# bet a call; Leduc's RAISE.
AGGRESSIVE = {KUHN: "BET", LEDUC: "RAISE"}
_PRIVATE = re.compile(r"\[Private: (\d+)\]")
_ROUND_MOVES = re.compile(r"\[Round([12]): ([\d ]*)\]")
_PUBLIC = re.compile(r"\[Public: (\d+)\]")
_LEDUC_MOVES = "fcr"  # Leduc's actions 0, 1, 2: fold, call (or check), raise

Range = tuple[float, float]
Table = dict[str, list[tuple[int, float]]]  # information state -> [(action, probability)]


@dataclass(frozen=True)
class InfoState:
    key: str  # OpenSpiel's information_state_string
    title: str  # as metrics.jsonl names it: Kuhn "Q pb", Leduc the key itself
    seat: int
    card: str  # the private card's rank, J, Q or K
    history: str  # the moves so far: Kuhn "pb"; Leduc "rc/K r" (round 1, public card, round 2)
    actions: tuple[int, ...]
    labels: tuple[str, ...]  # upper case, as the project's action labels without brackets


@dataclass(frozen=True)
class Reference:
    """Per state title, per action label, the (low, high) range over the equilibria."""

    game: str
    ranges: dict[str, dict[str, Range]]
    source: str  # how it was obtained, one line for the page
    exploitability: float  # of the equilibrium the ranges come from (Kuhn: 0)


def game_of(series: str) -> str | None:
    """The game an action-share series is of: `kuhn_poker` (metrics.jsonl), `exploit-kuhn_poker`
    (a loop item)."""
    for game in GAMES:
        if game in series:
            return game
    return None


def kuhn_title(key: str) -> str:
    """Kuhn's '1pb' is 'Q pb' (the card, then the moves so far; '-' for none)."""
    return f"{RANKS[int(key[0])]} {key[1:] or '-'}"


def _leduc_history(key: str) -> str:
    moves = {
        r: "".join(_LEDUC_MOVES[int(a)] for a in m.split()) for r, m in _ROUND_MOVES.findall(key)
    }
    public = _PUBLIC.search(key)
    if public is None:
        return moves.get("1", "") or "-"
    return f"{moves.get('1', '')}/{RANKS[int(public.group(1)) // 2]} {moves.get('2', '')}".rstrip()


def _describe(
    game: str, key: str, seat: int, actions: tuple[int, ...], names: list[str]
) -> InfoState:
    if game == KUHN:
        title, card, history = kuhn_title(key), RANKS[int(key[0])], key[1:]
    else:
        private = _PRIVATE.search(key)
        card = RANKS[int(private.group(1)) // 2] if private else "?"
        title, history = key, _leduc_history(key)
    return InfoState(key, title, seat, card, history, actions, tuple(n.upper() for n in names))


@functools.cache
def information_states(game: str) -> tuple[InfoState, ...]:
    """Every information state of the game, in depth-first order of OpenSpiel's tree."""
    from games.solvers import infostate_histories, replay

    found = []
    for key, histories in infostate_histories(game).items():
        state = replay(game, histories[0])
        actions = tuple(state.legal_actions())
        names = [state.action_to_string(a) for a in actions]
        found.append(_describe(game, key, state.current_player(), actions, names))
    return tuple(found)


# P(BET) at each Kuhn state as a function of alpha (player 0's Jack bet).
KUHN_FAMILY: dict[str, Callable[[float], float]] = {
    "J -": lambda a: a,
    "Q -": lambda a: 0.0,
    "K -": lambda a: 3 * a,
    "J pb": lambda a: 0.0,
    "Q pb": lambda a: a + 1 / 3,
    "K pb": lambda a: 1.0,
    "J p": lambda a: 1 / 3,
    "Q p": lambda a: 0.0,
    "K p": lambda a: 1.0,
    "J b": lambda a: 0.0,
    "Q b": lambda a: 1 / 3,
    "K b": lambda a: 1.0,
}


# Player 0's three states that move with alpha, and the alpha each probability implies: within
# their ranges they still form an equilibrium only when the three agree.
KUHN_ALPHA: dict[str, Callable[[float], float]] = {
    "J -": lambda p: p,
    "K -": lambda p: p / 3,
    "Q pb": lambda p: p - 1 / 3,
}


def kuhn_equilibrium(alpha: float) -> Table:
    """The member `alpha` of Kuhn's family, as an OpenSpiel policy table (action 1 is BET)."""
    table = {}
    for state in information_states(KUHN):
        bet = KUHN_FAMILY[state.title](alpha)
        table[state.key] = [(0, 1.0 - bet), (1, bet)]
    return table


def kuhn_reference() -> Reference:
    """Each state's BET range over alpha in [0, 1/3] (every function is linear in alpha, so the
    ends of the interval are the ends of the range), and PASS as its complement."""
    ranges = {}
    for title, bet in KUHN_FAMILY.items():
        low, high = sorted((bet(0.0), bet(ALPHA_MAX)))
        ranges[title] = {"BET": (low, high), "PASS": (1 - high, 1 - low)}
    return Reference(KUHN, ranges, "Kuhn's family, alpha in [0, 1/3]", 0.0)


@functools.cache
def leduc_solution(iterations: int = LEDUC_CFR_ITERATIONS) -> tuple[Table, float]:
    """OpenSpiel's CFR+ average policy after `iterations`, and its exploitability (cached)."""
    from games.solvers import cfr_average_policy, exploitability

    table = cfr_average_policy(LEDUC, "cfr+", iterations)
    return table, exploitability(LEDUC, table)


def leduc_reference(tolerance: float = LEDUC_TOLERANCE) -> Reference:
    """Each state's CFR+ probability +-tolerance, and per private card ('card J', the trainer's
    grouping) the plain mean over that card's states where the action is legal, +-tolerance."""
    table, exploitability = leduc_solution()
    ranges: dict[str, dict[str, Range]] = {}
    sums: dict[str, dict[str, list[float]]] = {}
    for state in information_states(LEDUC):
        probabilities = dict(table[state.key])
        point = {
            label: probabilities.get(a, 0.0)
            for a, label in zip(state.actions, state.labels, strict=True)
        }
        ranges[state.key] = {label: _around(p, tolerance) for label, p in point.items()}
        group = sums.setdefault(f"card {state.card}", {})
        for label, p in point.items():
            group.setdefault(label, []).append(p)
    for group, shares in sums.items():
        ranges[group] = {
            label: _around(sum(ps) / len(ps), tolerance) for label, ps in shares.items()
        }
    source = (
        f"OpenSpiel CFR+, {LEDUC_CFR_ITERATIONS} iterations (exploitability "
        f"{exploitability:.4f}), each probability +-{tolerance:g}"
    )
    return Reference(LEDUC, ranges, source, exploitability)


def _around(point: float, tolerance: float) -> Range:
    return max(0.0, point - tolerance), min(1.0, point + tolerance)


def reference(game: str) -> Reference | None:
    if game == KUHN:
        return kuhn_reference()
    if game == LEDUC:
        return leduc_reference()
    return None


def deviation(share: float, bounds: Range) -> float:
    """How far `share` lies outside [low, high]: positive above, negative below, 0 inside (or
    off by rounding only: 1/3 written out is not 1/3)."""
    low, high = bounds
    if share > high + ROUNDING:
        return share - high
    if share < low - ROUNDING:
        return share - low
    return 0.0
