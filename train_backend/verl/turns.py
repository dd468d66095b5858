"""Which turns each row of a verl batch holds, and the advantages of those turns.

A row is one training sample: one model call (`sample_unit: turn`), or one seat's whole
conversation in a game (`sample_unit: conversation`), whose response holds each of the seat's
replies with the observations in between masked out. The agent loop records, per row, the game,
episode, seat, and per turn its index, reward and the token span of its reply in the response.

verl calls an advantage estimator with token tensors only (`token_level_rewards`,
`response_mask`, the prompt `index`); it does not pass those per-sample fields. The mars trainer
reads them for the batch it is about to score and binds them here (`bound_turn_rows`) for the
length of verl's own `_compute_advantage`; the registered estimators read them back
(`current_turn_rows`). Both run in the trainer process, in that call, in the batch's row order.

This module needs numpy and torch only (no verl), so it is tested without verl installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from core.errors import MarsError
from train_backend.advantage import compute_advantages
from train_backend.group_filter import kept_advantages
from train_backend.verl import names

if TYPE_CHECKING:
    import torch

WHOLE_RESPONSE = -1  # a turn row's reply is its whole response


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple | np.ndarray) else [value]


@dataclass(frozen=True)
class TurnRows:
    """The turns of a batch: per turn its row, reply span, game, episode, seat, index, reward.

    `padding` is per batch row: verl's filler rows, which hold no turn.
    """

    row: np.ndarray
    start: np.ndarray  # first response token of the turn's reply
    end: np.ndarray  # one past its last token; WHOLE_RESPONSE: the row's whole response
    game: np.ndarray
    episode: np.ndarray
    group: np.ndarray
    seat: np.ndarray
    turn: np.ndarray
    reward: np.ndarray  # the turn's own reward, as the agent loop scored it
    padding: np.ndarray
    state: np.ndarray | None = None  # information-state key per turn (None where absent)
    tree_group: np.ndarray | None = None  # a branch's tree group key per turn (at_grpo), or None
    failed: np.ndarray | None = None  # per turn: a branch of a group whose replay failed
    keep: np.ndarray | None = None  # per turn: left in the update by group filtering (None: all)

    @property
    def batch_size(self) -> int:
        return int(self.padding.size)

    def __len__(self) -> int:
        return int(self.row.size)

    @classmethod
    def from_extra_fields(
        cls, extra_fields: Sequence[Mapping[str, Any] | None], padding: Sequence[bool]
    ) -> TurnRows:
        """Read the agent loop's fields; verl's padding rows (copies it appends) hold no turn."""
        if len(extra_fields) != len(padding):
            raise MarsError(
                f"{len(extra_fields)} rows of extra fields for a batch of {len(padding)} rows"
            )
        required = (names.GAME, names.EPISODE, names.SEAT, names.TURN, names.REWARD)
        columns: dict[str, list[Any]] = {
            key: [] for key in cls.__dataclass_fields__ if key not in ("padding", "keep")
        }
        is_padding = np.asarray(padding, dtype=bool)
        for row, fields in enumerate(extra_fields):
            if is_padding[row]:
                continue
            missing = [key for key in required if not fields or key not in fields]
            if missing:
                raise MarsError(
                    f"batch row {row} lacks {', '.join(missing)}: the MARSHAL estimators need "
                    f"samples from the '{names.AGENT_LOOP_NAME}' agent loop"
                )
            assert fields is not None
            turns = _as_list(fields[names.TURN])
            rewards = _as_list(fields[names.REWARD])
            states = _as_list(fields.get(names.STATE)) if names.STATE in fields else None
            spans = fields.get(names.SPANS)
            if spans is None:
                spans = [(0, WHOLE_RESPONSE)] * len(turns)
            if not (len(turns) == len(rewards) == len(spans)):
                raise MarsError(
                    f"batch row {row}: {len(turns)} turns, {len(rewards)} rewards and "
                    f"{len(spans)} reply spans"
                )
            if states is None or len(states) != len(turns):
                states = [None] * len(turns)
            for turn, reward, (start, end), state in zip(
                turns, rewards, spans, states, strict=True
            ):
                columns["state"].append(state)
                columns["tree_group"].append(fields.get(names.TREE_GROUP))
                columns["failed"].append(bool(fields.get(names.REPLAY_FAILED, False)))
                columns["row"].append(row)
                columns["start"].append(int(start))
                columns["end"].append(int(end))
                columns["game"].append(str(fields[names.GAME]))
                columns["episode"].append(str(fields[names.EPISODE]))
                columns["group"].append(str(fields.get(names.GROUP, fields[names.EPISODE])))
                columns["seat"].append(int(fields[names.SEAT]))
                columns["turn"].append(int(turn))
                columns["reward"].append(float(reward))
        types = {"row": np.int64, "start": np.int64, "end": np.int64, "seat": np.int64}
        types |= {"turn": np.int64, "reward": np.float64, "failed": bool}
        arrays = {
            key: np.asarray(values, dtype=types.get(key, object)) for key, values in columns.items()
        }
        return cls(**arrays, padding=is_padding)

    def with_keep(self, keep: np.ndarray) -> TurnRows:
        """These rows with a group filter's choice of turns (the others get advantage 0)."""
        return replace(self, keep=np.asarray(keep, dtype=bool))

    def row_tree_groups(self) -> list[str | None]:
        """Per batch row, the tree group key of the branch it holds (None: not a branch)."""
        groups: list[str | None] = [None] * self.batch_size
        if self.tree_group is None:
            return groups
        for row, group in zip(self.row, self.tree_group, strict=True):
            if group is not None:
                groups[int(row)] = str(group)
        return groups

    def spans(self, response_lengths: Sequence[int]) -> list[tuple[int, int, int]]:
        """(row, start, end) of every turn's reply, whole-response spans resolved."""
        resolved = []
        for row, start, end in zip(self.row, self.start, self.end, strict=True):
            length = int(response_lengths[row])
            stop = length if end == WHOLE_RESPONSE else int(end)
            if not 0 <= start <= stop <= length:
                raise MarsError(
                    f"a turn's reply span [{start}, {stop}) lies outside row {row}'s response "
                    f"of {length} tokens"
                )
            resolved.append((int(row), int(start), stop))
        return resolved


_BOUND_ROWS: ContextVar[TurnRows | None] = ContextVar("mars_turn_rows", default=None)


@contextmanager
def bound_turn_rows(rows: TurnRows) -> Iterator[TurnRows]:
    token = _BOUND_ROWS.set(rows)
    try:
        yield rows
    finally:
        _BOUND_ROWS.reset(token)


def current_turn_rows(estimator: str) -> TurnRows:
    rows = _BOUND_ROWS.get()
    if rows is None:
        raise MarsError(
            f"advantage estimator '{estimator}' needs each row's game, seat and turn: run it with "
            f"trainer.v1.trainer_mode={names.TRAINER_NAME} (mars train --trainer verl sets it)"
        )
    return rows


def turn_reward_scores(rows: TurnRows, response_lengths: Sequence[int]) -> list[torch.Tensor]:
    """Per row, a score per response token: each turn's reward on its reply's last token.

    This is the layout verl's own `AgentLoopOutput.as_dict` gives `rm_scores` for one reward;
    the mars trainer writes it back because verl copies the final output's score onto the others.
    """
    import torch

    scores = [torch.zeros(int(length), dtype=torch.float32) for length in response_lengths]
    for (row, start, end), reward in zip(rows.spans(response_lengths), rows.reward, strict=True):
        if end > start:
            scores[row][end - 1] += float(reward)
    return scores


def turn_table(
    rows: TurnRows, token_level_rewards: torch.Tensor, response_mask: torch.Tensor
) -> tuple[dict[str, np.ndarray], list[tuple[int, int, int]]]:
    """The turns as `compute_advantages` takes them, and each turn's (row, start, end).

    A turn's reward is the sum of the token-level rewards over its reply (the score on its last
    token, less any in-reward KL penalty verl applied); its tokens are the reply's masked tokens.
    """
    import torch

    if token_level_rewards.shape != response_mask.shape:
        raise MarsError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} differ in shape"
        )
    if token_level_rewards.shape[0] != rows.batch_size:
        raise MarsError(
            f"the batch has {token_level_rewards.shape[0]} rows but {rows.batch_size} rows of "
            "turn records"
        )
    mask = response_mask.detach().to(device="cpu", dtype=torch.float64)
    rewards = token_level_rewards.detach().to(device="cpu", dtype=torch.float64) * mask
    width = int(mask.shape[-1])
    spans = rows.spans([width] * rows.batch_size)
    reward = np.array([float(rewards[r, s:e].sum()) for r, s, e in spans], dtype=np.float64)
    tokens = np.array([int(mask[r, s:e].sum()) for r, s, e in spans], dtype=np.int64)
    table = {
        "game": rows.game,
        "episode": rows.episode,
        "seat": rows.seat,
        "turn": rows.turn,
        "reward": reward,
        "tokens": tokens,
        "group": rows.group,
    }
    if rows.state is not None and all(state is not None for state in rows.state):
        table["state"] = rows.state
    return table, spans


def token_advantages(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    rows: TurnRows,
    **options: Any,
) -> torch.Tensor:
    """`compute_advantages` on the batch's turns, each turn's on its own reply tokens.

    Tokens outside every reply (observations in a conversation, padding) and verl's padding rows
    get 0; with `rows.keep` (group filtering) the estimator sees the kept turns only and the
    others get 0.
    """
    import torch

    table, spans = turn_table(rows, token_level_rewards, response_mask)
    if not len(rows):
        per_turn = np.zeros(0)
    elif rows.keep is not None:  # group filtering: the estimator sees the kept turns only
        per_turn = kept_advantages(table, rows.keep, estimator, **options)
    else:
        per_turn = compute_advantages(table, estimator, **options)
    spread = torch.zeros(token_level_rewards.shape, dtype=torch.float64)
    for (row, start, end), value in zip(spans, per_turn, strict=True):
        spread[row, start:end] = float(value)
    spread *= response_mask.detach().to(device="cpu", dtype=torch.float64)
    return spread.to(device=token_level_rewards.device, dtype=token_level_rewards.dtype)
