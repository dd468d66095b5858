"""verl's synchronous v1 trainer, with the per-turn fields the MARSHAL estimators need.

Registered as `trainer.v1.trainer_mode=mars`. Before balancing a step's batch over the ranks it
puts the samples in their dataset rows' order (`in_row_order`) rather than the order the rows'
rollouts finished in, so the update's micro-batches and sums are the same from run to run. It
differs from verl's `sync` trainer in one more step, `_compute_advantage`, which it wraps rather
than rewrites:

1. it reads the batch's `extra_fields` (the agent loop's game, episode, seat, and each turn's
   index, reward and reply span) and the tags that mark verl's padding rows;
2. it writes each turn's own reward back into `rm_scores`, on its reply's last token (verl's v1
   worker copies the final output's score onto every earlier output of a game), and, for tree
   samples (at_grpo), each branch's tree group key (episode, seat, turn) into verl's `uid`, so
   the prompt groups verl passes its estimator are the tree's groups;
3. with group filtering (`names.GROUP_FILTER_ENV`), or when a branch's replay failed, it picks
   the turns the update keeps (`group_filter.select_per_seat`), sets the response mask of every
   other row to 0 (verl then leaves it out of the loss, as it does its own padding rows) and
   adds the filter's counts to the step's metrics;
4. it binds the rows (`turns.bound_turn_rows`) and calls verl's own `_compute_advantage`, whose
   call to the registered estimator then finds them (and scores the kept turns only);
5. it reads back the advantages verl stored for the update and writes the step's turns with the
   advantage each one's reply tokens carry to `RUN/verl/turns/step_N.jsonl` (when the launcher
   names that folder in `names.TURNS_DIR_ENV`), and the tree branches among them to the run's
   branch log, `RUN/branches/step_N.jsonl.gz` (`core.branch_log`), their collapse
   signals to the step's metrics.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from core import branch_log
from core.errors import MarsError
from train_backend.group_filter import GroupFilter, select_per_seat
from train_backend.verl import names
from train_backend.verl.turns import TurnRows, bound_turn_rows, turn_reward_scores


def _rows_of(nested: Any) -> list[torch.Tensor]:
    if getattr(nested, "is_nested", False):
        return list(nested.unbind())
    return list(nested)


def read_turn_rows(
    batch: KVBatchMeta,
) -> tuple[TurnRows, list[int], list[Any], list[dict[str, Any]]]:
    """The turns of every row of `batch`, each row's response length, policy version and
    extra fields."""
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
    lengths = [int(row.numel()) for row in _rows_of(data.get("response_mask"))]
    versions = [(fields or {}).get("min_global_steps") for fields in extra_fields]
    return rows, lengths, versions, [dict(fields or {}) for fields in extra_fields]


def restore_turn_scores(batch: KVBatchMeta, rows: TurnRows, lengths: list[int]) -> None:
    scores = turn_reward_scores(rows, lengths)
    nested = torch.nested.as_nested_tensor(scores, layout=torch.jagged)
    tq.kv_batch_put(
        keys=batch.keys,
        partition_id=batch.partition_id,
        fields=TensorDict({"rm_scores": nested}, batch_size=len(batch)),
    )


def set_tree_uids(batch: KVBatchMeta, rows: TurnRows) -> None:
    """verl's `uid` of every branch sample := its tree group key (other rows keep theirs)."""
    groups = rows.row_tree_groups()
    if not any(groups):
        return
    stored = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid"]
    )
    uids = [str(uid) for uid in stored.get("uid").tolist()]
    new = [group if group is not None else uid for group, uid in zip(groups, uids, strict=True)]
    tq.kv_batch_put(
        keys=batch.keys,
        partition_id=batch.partition_id,
        fields=list_of_dict_to_tensordict([{"uid": uid} for uid in new]),
    )


def group_filter_settings() -> GroupFilter:
    """The run's group filtering, from the environment the launcher gives every worker."""
    return GroupFilter(**json.loads(os.environ.get(names.GROUP_FILTER_ENV) or "{}"))


def filter_groups(batch: KVBatchMeta, rows: TurnRows, metrics: dict[str, Any]) -> TurnRows:
    """Group filtering (and the groups of failed replays) on verl: the rows the update leaves out
    get response mask 0, so verl's loss, KL and entropy skip them, and the estimator scores the
    kept turns only. verl 0.9.1 divides each mini-batch's summed sequence losses by its row count,
    its padding rows and these included, so a step that drops rows also takes a smaller one."""
    settings = group_filter_settings()
    failed = rows.failed if rows.failed is not None and rows.failed.any() else None
    if not len(rows) or not (settings.active or failed is not None):
        return rows
    table = {"game": rows.game, "episode": rows.episode, "seat": rows.seat}
    table |= {"turn": rows.turn, "reward": rows.reward}
    selection = select_per_seat(table, settings, rows.failed)
    metrics.update(selection.metrics())
    kept_rows = {int(row) for row in rows.row[selection.keep]}
    dropped = sorted({int(row) for row in rows.row} - kept_rows)
    partly = kept_rows & {int(row) for row in rows.row[~selection.keep]}
    if partly:
        raise MarsError(
            f"group filtering keeps some turns of batch row {min(partly)} and drops others: "
            "it needs one turn per sample (tree samples)"
        )
    if dropped:
        keys = [batch.keys[row] for row in dropped]
        stored = tq.kv_batch_get(
            keys=keys, partition_id=batch.partition_id, select_fields=["response_mask"]
        )
        zeros = [torch.zeros_like(mask) for mask in _rows_of(stored.get("response_mask"))]
        nested = torch.nested.as_nested_tensor(zeros, layout=torch.jagged)
        tq.kv_batch_put(
            keys=keys,
            partition_id=batch.partition_id,
            fields=TensorDict({"response_mask": nested}, batch_size=len(keys)),
        )
    return rows.with_keep(selection.keep)


def applied_turns(
    rows: TurnRows,
    lengths: list[int],
    advantages: list[torch.Tensor],
    masks: list[torch.Tensor],
    versions: list[Any],
    uids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Each turn with the advantage on its reply's tokens, as verl stored it for the update,
    and the policy version (verl's global step of the weights) that played it."""
    records = []
    for index, (row, start, end) in enumerate(rows.spans(lengths)):
        mask = masks[row][start:end].bool()
        values = advantages[row][start:end][mask].double()
        if values.numel() and not torch.allclose(values, values[0].expand_as(values)):
            raise RuntimeError(f"turn {index}: its reply tokens carry different advantages")
        records.append(
            {
                "game": str(rows.game[index]),
                "episode": str(rows.episode[index]),
                "group": str(rows.group[index]),
                "seat": int(rows.seat[index]),
                "turn": int(rows.turn[index]),
                "reward": float(rows.reward[index]),
                "tokens": int(values.numel()),
                "advantage": float(values[0]) if values.numel() else 0.0,
                "row": row,
                "span": [start, end],
                "weights_step": versions[row],
                "uid": uids[row] if uids is not None else None,  # the group verl scored it in
                "state": rows.state[index] if rows.state is not None else None,
                "kept": bool(rows.keep[index]) if rows.keep is not None else True,
            }
        )
    return records


def row_fields(batch: KVBatchMeta) -> list[dict[str, Any]]:
    """Each sample's `extra_fields` (what the agent loop wrote for it), in the batch's order."""
    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
    )
    stacked = data.get("extra_fields")
    items = stacked.tolist() if hasattr(stacked, "tolist") else list(stacked)
    return [dict(getattr(item, "data", item) or {}) for item in items]


def in_row_order(batch: KVBatchMeta) -> KVBatchMeta:
    """The batch reordered by each sample's `names.ORDER` (row seed, session, index among the
    row's outputs); unchanged when a sample has none (the game loops do not write it)."""
    if not batch.keys:
        return batch
    places = [fields.get(names.ORDER) for fields in row_fields(batch)]
    if any(place is None for place in places):
        return batch
    keys = [tuple(int(part) for part in str(place).split(":")) for place in places]
    batch.reorder(sorted(range(len(keys)), key=keys.__getitem__))
    return batch


def write_turns(folder: Path, step: int, records: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step}.jsonl"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(record) + "\n" for record in records))
    tmp.replace(path)
    return path


def branch_lines(
    step: int, records: list[dict[str, Any]], extra_fields: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The step's tree branches (at_grpo samples) for the run's branch log; a branch counts as
    trained when the update kept it and its tokens carried a non-zero advantage."""
    lines = []
    for record in records:
        fields = extra_fields[record["row"]]
        if fields.get(names.TREE_GROUP) is None:
            continue
        lines.append(
            branch_log.branch_line(
                step=step,
                game=record["game"],
                episode=record["episode"],
                seat=record["seat"],
                turn=record["turn"],
                state=str(record["state"]),
                branch=int(fields.get(names.BRANCH, 0)),
                chosen=bool(fields.get(names.CHOSEN, False)),
                forced=bool(fields.get(names.FORCED, False)),
                role=fields.get(names.ROLE),
                reply=str(fields.get(names.REPLY) or ""),
                observation=str(fields.get(names.OBSERVATION) or ""),
                action=fields.get(names.ACTION),
                legal=fields.get(names.LEGAL),
                ret=record["reward"],
                advantage=record["advantage"],
                trained=record["kept"] and record["advantage"] != 0.0,
            )
        )
    return lines


@register_trainer(names.TRAINER_NAME)
class MarshalPPOTrainer(PPOTrainerSync):
    """verl's sync trainer; advantages from per-turn rows (see the module docstring)."""

    def _build_replay_buffer(self) -> Any:
        # verl keys trainers by `trainer.v1.trainer_mode` and also reads that name to pick its
        # sampling semantics; this trainer is a sync trainer under another name.
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()

    def _balance_batch(
        self, batch: KVBatchMeta, metrics: dict, logging_prefix: str = "global_seqlen", **kw: Any
    ) -> KVBatchMeta:
        return super()._balance_batch(in_row_order(batch), metrics, logging_prefix, **kw)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        rows, lengths, versions, extra_fields = read_turn_rows(batch)
        restore_turn_scores(batch, rows, lengths)
        set_tree_uids(batch, rows)
        rows = filter_groups(batch, rows, metrics)
        with bound_turn_rows(rows):
            batch = super()._compute_advantage(batch, metrics)
        folder = os.environ.get(names.TURNS_DIR_ENV)
        if folder:
            stored = tq.kv_batch_get(
                keys=batch.keys,
                partition_id=batch.partition_id,
                select_fields=["advantages", "response_mask", "uid"],
            )
            records = applied_turns(
                rows,
                lengths,
                _rows_of(stored.get("advantages")),
                _rows_of(stored.get("response_mask")),
                versions,
                [str(uid) for uid in stored.get("uid").tolist()],
            )
            write_turns(Path(folder), int(self.global_steps), records)
            run = os.environ.get(names.BRANCHES_RUN_ENV)
            branches = branch_lines(int(self.global_steps), records, extra_fields)
            if run and branches:
                branch_log.write_step(Path(run), int(self.global_steps), branches)
                metrics.update(branch_log.sampled_collapse_signals(branches))
        return batch
