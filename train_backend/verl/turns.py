"""Which turn each row of a verl batch is, and the advantages of those rows.

verl calls an advantage estimator with token tensors only (`token_level_rewards`,
`response_mask`, the prompt `index`); it does not pass the per-sample fields where the agent loop
put the seat, turn, episode and game of each row. The mars trainer reads those fields for the
batch it is about to score and binds them here (`bound_turn_rows`) for the length of verl's own
`_compute_advantage`; the registered estimators read them back (`current_turn_rows`). Both run in
the trainer process, in that call, in the batch's row order.

This module needs numpy and torch only (no verl), so it is tested without verl installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import MarsError
from train_backend.advantage import compute_advantages
from train_backend.verl import names

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TurnRows:
    """Per batch row: its game, episode, seat and turn; `padding` marks verl's filler rows."""

    game: np.ndarray
    episode: np.ndarray
    group: np.ndarray
    seat: np.ndarray
    turn: np.ndarray
    reward: np.ndarray  # the turn's own reward, as the agent loop scored it
    padding: np.ndarray

    def __len__(self) -> int:
        return int(self.padding.size)

    @classmethod
    def from_extra_fields(
        cls, extra_fields: Sequence[Mapping[str, Any] | None], padding: Sequence[bool]
    ) -> TurnRows:
        """Read the agent loop's per-turn fields; padding rows (copies verl appends) are kept
        as placeholders so the arrays stay aligned with the batch."""
        if len(extra_fields) != len(padding):
            raise MarsError(
                f"{len(extra_fields)} rows of extra fields for a batch of {len(padding)} rows"
            )
        required = (names.GAME, names.EPISODE, names.SEAT, names.TURN, names.REWARD)
        n = len(padding)
        game = np.empty(n, dtype=object)
        episode = np.empty(n, dtype=object)
        group = np.empty(n, dtype=object)
        seat = np.full(n, -1, dtype=np.int64)
        turn = np.full(n, -1, dtype=np.int64)
        reward = np.zeros(n, dtype=np.float64)
        is_padding = np.asarray(padding, dtype=bool)
        for row, fields in enumerate(extra_fields):
            if is_padding[row]:
                game[row] = episode[row] = group[row] = ""
                continue
            missing = [key for key in required if not fields or key not in fields]
            if missing:
                raise MarsError(
                    f"batch row {row} lacks {', '.join(missing)}: the MARSHAL estimators need "
                    f"samples from the '{names.AGENT_LOOP_NAME}' agent loop"
                )
            assert fields is not None
            game[row] = str(fields[names.GAME])
            episode[row] = str(fields[names.EPISODE])
            group[row] = str(fields.get(names.GROUP, fields[names.EPISODE]))
            seat[row] = int(fields[names.SEAT])
            turn[row] = int(fields[names.TURN])
            reward[row] = float(fields[names.REWARD])
        return cls(game, episode, group, seat, turn, reward, is_padding)


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
            f"trainer.v1.trainer_mode={names.TRAINER_NAME} (mars train --backend verl sets it)"
        )
    return rows


def turn_reward_scores(rows: TurnRows, response_lengths: Sequence[int]) -> list[torch.Tensor]:
    """Per row, a score per response token: the turn's reward on its last token, else zero.

    This is the layout verl's own `AgentLoopOutput.as_dict` gives `rm_scores`; the mars trainer
    writes it back because verl copies the final turn's score onto every earlier turn.
    """
    import torch

    scores = []
    for row, length in enumerate(response_lengths):
        row_scores = torch.zeros(int(length), dtype=torch.float32)
        if length > 0 and not rows.padding[row]:
            row_scores[-1] = float(rows.reward[row])
        scores.append(row_scores)
    return scores


def token_advantages(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    rows: TurnRows,
    **options: Any,
) -> torch.Tensor:
    """`compute_advantages` on the batch's turns, spread over each row's response tokens.

    A turn's reward is the sum of its row's token-level rewards (the score on its last token, less
    any in-reward KL penalty verl applied). Padding rows get advantage 0.
    """
    import torch

    if token_level_rewards.shape != response_mask.shape:
        raise MarsError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} differ in shape"
        )
    if token_level_rewards.shape[0] != len(rows):
        raise MarsError(
            f"the batch has {token_level_rewards.shape[0]} rows but {len(rows)} turn records"
        )
    mask = response_mask.detach().to(device="cpu", dtype=torch.float64)
    rewards = (token_level_rewards.detach().to(device="cpu", dtype=torch.float64) * mask).sum(-1)
    real = ~rows.padding
    table = {
        "game": rows.game[real],
        "episode": rows.episode[real],
        "seat": rows.seat[real],
        "turn": rows.turn[real],
        "reward": rewards.numpy()[real],
        "tokens": mask.sum(-1).numpy()[real].astype(np.int64),
        "group": rows.group[real],
    }
    per_row = np.zeros(len(rows), dtype=np.float64)
    per_row[real] = compute_advantages(table, estimator, **options)
    spread = torch.from_numpy(per_row).unsqueeze(-1) * mask
    return spread.to(device=token_level_rewards.device, dtype=token_level_rewards.dtype)
