"""The table of turns the advantage estimators read: validated, then laid out in canonical order.

A *trajectory* is one seat's turns in one episode of one game. Episode ids are scoped by game (the
same seed may be used in two games), so a trajectory is keyed by (game, episode, seat).

Every per-turn array in a `TurnTable` is indexed by *slot*: trajectories sorted by (game, episode,
seat) value, turns ascending inside each. Because that order depends only on the rows' contents,
the estimators give bit-identical results however the caller ordered the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.errors import MarsError

REQUIRED_COLUMNS = ("episode", "game", "seat", "turn", "reward")


class _SlotOrder:
    """What a table laid out in slots knows of the caller's rows (`row_of_slot`)."""

    row_of_slot: np.ndarray  # the caller's row index of each slot

    @property
    def n_rows(self) -> int:
        return int(self.row_of_slot.size)

    def to_rows(self, per_slot: np.ndarray) -> np.ndarray:
        """Put a per-slot array back into the caller's row order."""
        out = np.empty(self.n_rows, dtype=np.float64)
        out[self.row_of_slot] = per_slot
        return out


@dataclass(frozen=True)
class TurnTable(_SlotOrder):
    """Turns in slot order, with per-trajectory keys as small integer codes."""

    row_of_slot: np.ndarray  # the caller's row index of each slot
    reward: np.ndarray  # float64 per slot
    trajectory: np.ndarray  # trajectory code per slot, 0..n_trajectories-1, ascending
    starts: np.ndarray  # first slot of each trajectory
    lengths: np.ndarray  # number of turns of each trajectory
    game: np.ndarray  # game code of each trajectory
    seat: np.ndarray  # seat code of each trajectory
    tokens: np.ndarray | None  # token count per slot, when asked for and present
    group: np.ndarray | None  # prompt-group code of each trajectory, when asked for and present
    state: np.ndarray | None = None  # information-state code per slot, when asked for

    @property
    def n_trajectories(self) -> int:
        return int(self.lengths.size)


def load_turn_table(
    turns: Any, *, with_tokens: bool = False, with_group: bool = False, with_state: bool = False
) -> TurnTable:
    """Validate `turns` (a DataFrame or a mapping of equal-length columns) and lay it out by slot.

    Raises MarsError on missing columns, unequal lengths, missing keys, non-finite rewards, and on
    turn indices that are not exactly 0..n-1 once each within every trajectory. `with_state`
    requires the `state` column (information-state keys).
    """
    wanted = list(REQUIRED_COLUMNS)
    if with_tokens:
        wanted.append("tokens")
    if with_group:
        wanted.append("group")
    if with_state:
        wanted.append("state")
    columns = _read_columns(turns, wanted, required=("state",) if with_state else ())
    n_rows = len(columns["reward"])

    game, _ = _codes(columns["game"], "game")
    episode, n_episodes = _codes(columns["episode"], "episode")
    seat, n_seats = _codes(columns["seat"], "seat")
    reward = _finite_floats(columns["reward"], "reward")
    turn = _turn_indices(columns["turn"])

    game_episode, _ = _combine(game, episode, n_episodes)
    trajectory, n_trajectories = _combine(game_episode, seat, n_seats)
    lengths = np.bincount(trajectory, minlength=n_trajectories)
    starts = np.cumsum(lengths) - lengths
    slot = _slots(trajectory, turn, starts, lengths, columns)

    row_of_slot = np.empty(n_rows, dtype=np.int64)
    row_of_slot[slot] = np.arange(n_rows)
    game_of_trajectory = np.empty(n_trajectories, dtype=np.int64)
    game_of_trajectory[trajectory] = game
    seat_of_trajectory = np.empty(n_trajectories, dtype=np.int64)
    seat_of_trajectory[trajectory] = seat

    tokens = None
    if "tokens" in columns:
        tokens = _token_counts(columns["tokens"])[row_of_slot]
    group = None
    if "group" in columns:
        group = _group_of_trajectory(columns["group"], trajectory, n_trajectories)

    state = _codes(columns["state"], "state")[0][row_of_slot] if with_state else None
    return TurnTable(
        row_of_slot=row_of_slot,
        reward=reward[row_of_slot],
        trajectory=np.repeat(np.arange(n_trajectories), lengths),
        starts=starts,
        lengths=lengths,
        game=game_of_trajectory,
        seat=seat_of_trajectory,
        tokens=tokens,
        group=group,
        state=state,
    )


@dataclass(frozen=True)
class BranchTable(_SlotOrder):
    """Tree-sampled replies in canonical order: by group, then return, then state."""

    row_of_slot: np.ndarray
    reward: np.ndarray  # the branch's return, per slot
    group: np.ndarray  # code of (game, episode, seat, turn) per slot
    n_groups: int
    state: np.ndarray | None  # information-state code per slot, when asked for


def load_branch_table(turns: Any, *, with_state: bool = False) -> BranchTable:
    """Validate a table of branches: the turn-table columns, where the K replies sampled at one
    state share (game, episode, seat, turn) and `reward` is each branch's return. Rows are laid
    out by content, so the result does not depend on their order."""
    wanted = [*REQUIRED_COLUMNS, "state"] if with_state else list(REQUIRED_COLUMNS)
    columns = _read_columns(turns, wanted, required=("state",) if with_state else ())
    game, _ = _codes(columns["game"], "game")
    episode, n_episodes = _codes(columns["episode"], "episode")
    seat, n_seats = _codes(columns["seat"], "seat")
    turn = _turn_indices(columns["turn"])
    reward = _finite_floats(columns["reward"], "reward")
    key, _ = _combine(game, episode, n_episodes)
    key, _ = _combine(key, seat, n_seats)
    group, n_groups = _combine(key, turn, int(turn.max(initial=0)) + 1)
    state = _codes(columns["state"], "state")[0] if with_state else None
    sort_keys = (reward, group) if state is None else (state, reward, group)
    row_of_slot = np.lexsort(sort_keys).astype(np.int64)
    return BranchTable(
        row_of_slot=row_of_slot,
        reward=reward[row_of_slot],
        group=group[row_of_slot],
        n_groups=n_groups,
        state=None if state is None else state[row_of_slot],
    )


def _read_columns(turns: Any, wanted: list[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The wanted columns present in `turns` (optional ones may be absent), all of one length."""
    if isinstance(turns, pd.DataFrame):
        available = set(turns.columns)
    elif isinstance(turns, Mapping):
        available = set(turns)
    else:
        raise MarsError(
            f"turns must be a pandas DataFrame or a mapping of columns, not {type(turns).__name__}"
        )
    needed = (*REQUIRED_COLUMNS, *required)
    missing = [name for name in needed if name not in available]
    if missing:
        raise MarsError(
            f"turns table lacks column(s) {', '.join(missing)}; required: {', '.join(needed)}"
        )
    columns: dict[str, Any] = {}
    for name in wanted:
        if name not in available:
            continue
        values = turns[name]
        if not isinstance(values, pd.Series):
            values = np.asarray(values)
            if values.ndim != 1:
                raise MarsError(
                    f"column '{name}' must be one-dimensional, got shape {values.shape}"
                )
        columns[name] = values
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        described = ", ".join(f"{name}={length}" for name, length in lengths.items())
        raise MarsError(f"turns columns differ in length: {described}")
    return columns


def _codes(values: Any, name: str) -> tuple[np.ndarray, int]:
    """Integer codes ordered like the values themselves, so the layout is order-independent."""
    if _is_plain_integer(values):
        return dense_codes(np.asarray(values, dtype=np.int64))
    try:
        codes, uniques = pd.factorize(values, sort=True)
    except TypeError:
        raise MarsError(f"column '{name}' mixes values that cannot be compared") from None
    missing = np.flatnonzero(codes < 0)
    if missing.size:
        raise MarsError(
            f"column '{name}' has {missing.size} missing value(s) (first at row {missing[0]})"
        )
    return codes.astype(np.int64, copy=False), len(uniques)


def _combine(major: np.ndarray, minor: np.ndarray, n_minor: int) -> tuple[np.ndarray, int]:
    """Codes of the pairs (major, minor), ordered lexicographically; at most n_rows of them."""
    return dense_codes(major * n_minor + minor)


def dense_codes(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Map int64 keys to 0..n_distinct-1 keeping their order (equal keys share a code)."""
    if keys.size == 0:
        return keys.astype(np.int64), 0
    low, high = int(keys.min()), int(keys.max())
    if high - low <= 4 * keys.size + 1024:
        # Small key range: a presence table beats hashing and sorting by a wide margin.
        shifted = keys - low
        present = np.zeros(high - low + 1, dtype=bool)
        present[shifted] = True
        code_of_key = np.cumsum(present) - 1
        return code_of_key[shifted], int(code_of_key[-1]) + 1
    codes, uniques = pd.factorize(keys, sort=True)
    return codes.astype(np.int64, copy=False), len(uniques)


def _as_floats(values: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise MarsError(f"column '{name}' must be numeric") from None


def _finite_floats(values: Any, name: str) -> np.ndarray:
    floats = _as_floats(values, name)
    for bad, what in ((np.isnan(floats), "NaN"), (np.isinf(floats), "infinite")):
        rows = np.flatnonzero(bad)
        if rows.size:
            raise MarsError(
                f"column '{name}' has {rows.size} {what} value(s) (first at row {rows[0]})"
            )
    return floats


def _is_plain_integer(values: Any) -> bool:
    """A numpy integer column (not a nullable pandas one, which may hold missing values)."""
    return isinstance(values.dtype, np.dtype) and values.dtype.kind in "iu"


def _turn_indices(values: Any) -> np.ndarray:
    if _is_plain_integer(values):
        integers = np.asarray(values, dtype=np.int64)
        negative = np.flatnonzero(integers < 0)
        if negative.size:
            raise MarsError(
                f"column 'turn' must hold whole numbers >= 0; row {negative[0]} has "
                f"{integers[negative[0]]}"
            )
        return integers
    floats = _finite_floats(values, "turn")
    bad = np.flatnonzero((floats < 0) | (floats != np.floor(floats)))
    if bad.size:
        raise MarsError(
            f"column 'turn' must hold whole numbers >= 0; row {bad[0]} has {floats[bad[0]]!r}"
        )
    return floats.astype(np.int64)


def _token_counts(values: Any) -> np.ndarray:
    tokens = _finite_floats(values, "tokens")
    negative = np.flatnonzero(tokens < 0)
    if negative.size:
        raise MarsError(
            f"column 'tokens' must be >= 0; row {negative[0]} has {tokens[negative[0]]}"
        )
    if tokens.size and tokens.sum() <= 0:
        raise MarsError("column 'tokens' sums to zero: no token to weight the advantages by")
    return tokens


def _slots(
    trajectory: np.ndarray,
    turn: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    columns: dict[str, Any],
) -> np.ndarray:
    """Slot of every row; raises unless each trajectory's turns are 0..n-1, each exactly once."""
    n_rows = trajectory.size
    in_range = turn < lengths[trajectory]
    slot = starts[trajectory] + np.where(in_range, turn, 0)
    if in_range.all():
        taken = np.bincount(slot, minlength=n_rows)
        if taken.max(initial=0) <= 1:
            return slot
        bad_row = int(np.flatnonzero(taken[slot] > 1)[0])
    else:
        bad_row = int(np.flatnonzero(~in_range)[0])
    rows = np.flatnonzero(trajectory == trajectory[bad_row])
    key = ", ".join(
        f"{name} {_value_at(columns[name], bad_row)!r}" for name in ("game", "episode", "seat")
    )
    found = sorted(int(t) for t in turn[rows])
    shown = ", ".join(map(str, found[:12])) + (", ..." if len(found) > 12 else "")
    raise MarsError(
        f"turns of {key} must be 0..{rows.size - 1} once each (0-based within the seat's own "
        f"turns); got [{shown}]"
    )


def _value_at(values: Any, row: int) -> Any:
    value = values.iloc[row] if isinstance(values, pd.Series) else values[row]
    return value.item() if isinstance(value, np.generic) else value


def _group_of_trajectory(values: Any, trajectory: np.ndarray, n_trajectories: int) -> np.ndarray:
    codes, _ = _codes(values, "group")
    per_trajectory = np.empty(n_trajectories, dtype=np.int64)
    per_trajectory[trajectory] = codes
    mixed = np.flatnonzero(per_trajectory[trajectory] != codes)
    if mixed.size:
        raise MarsError(
            "column 'group' must be constant within a trajectory (game, episode, seat); "
            f"row {mixed[0]} differs from another turn of the same trajectory"
        )
    return per_trajectory
