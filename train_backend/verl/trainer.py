"""verl's synchronous v1 trainer, with the per-turn fields the MARSHAL estimators need.

Registered as `trainer.v1.trainer_mode=mars`. It differs from verl's `sync` trainer in one step,
`_compute_advantage`, which it wraps rather than rewrites:

1. it reads the batch's `extra_fields` (the agent loop's game, episode, seat, turn and reward of
   each row) and the tags that mark verl's padding rows;
2. it writes each turn's own reward back into `rm_scores` (verl's v1 worker copies the final
   turn's score onto every earlier output of a game);
3. it binds the rows (`turns.bound_turn_rows`) and calls verl's own `_compute_advantage`, whose
   call to the registered estimator then finds them.
"""

from __future__ import annotations

from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from train_backend.verl import names
from train_backend.verl.turns import TurnRows, bound_turn_rows, turn_reward_scores


def _response_lengths(response_mask: Any, rows: int) -> list[int]:
    if getattr(response_mask, "is_nested", False):
        return [int(n) for n in response_mask.offsets().diff().tolist()]
    return [int(response_mask.shape[-1])] * rows


def read_turn_rows(batch: KVBatchMeta) -> tuple[TurnRows, list[int]]:
    """The turn of every row of `batch` and the length of each row's response."""
    data = tq.kv_batch_get(
        keys=batch.keys,
        partition_id=batch.partition_id,
        select_fields=["extra_fields", "response_mask"],
    )
    stacked = data.get("extra_fields")
    items = stacked.tolist() if hasattr(stacked, "tolist") else list(stacked)
    extra_fields = [getattr(item, "data", item) for item in items]
    padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
    rows = TurnRows.from_extra_fields(extra_fields, padding)
    return rows, _response_lengths(data.get("response_mask"), len(batch))


def restore_turn_scores(batch: KVBatchMeta, rows: TurnRows, lengths: list[int]) -> None:
    scores = turn_reward_scores(rows, lengths)
    nested = torch.nested.as_nested_tensor(scores, layout=torch.jagged)
    tq.kv_batch_put(
        keys=batch.keys,
        partition_id=batch.partition_id,
        fields=TensorDict({"rm_scores": nested}, batch_size=len(batch)),
    )


@register_trainer(names.TRAINER_NAME)
class MarshalPPOTrainer(PPOTrainerSync):
    """verl's sync trainer; advantages from per-turn rows (see the module docstring)."""

    def _build_replay_buffer(self) -> Any:
        # verl keys trainers by `trainer.v1.trainer_mode` and also reads that name to pick its
        # sampling semantics; this trainer is a sync trainer under another name.
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        rows, lengths = read_turn_rows(batch)
        restore_turn_scores(batch, rows, lengths)
        with bound_turn_rows(rows):
            return super()._compute_advantage(batch, metrics)
