"""The PPO update of one policy on a step's samples (shared by the game and workflow trainers).

Minibatches of `minibatch_turns` samples, `ppo_epochs` passes, each minibatch split into
micro-batches under MICRO_BATCH_TOKENS padded tokens whose gradients are accumulated; rows with
the same prompt share one prompt pass (`ppo.pack_rows`). See docs/training.md, "The loss".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from train_backend.config import TrainConfig
from train_backend.local.ppo import (
    batch_log_probs_and_entropy,
    distinct_prompts,
    pack_rows,
    ppo_loss,
)
from train_backend.local.rollout import TurnSample

if TYPE_CHECKING:
    import torch

    from core.causal_lm import Policy

MICRO_BATCH_TOKENS = 16_384


def step_generator(seed: int, step: int, stream: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 16 + stream)


@dataclass
class UpdateStats:
    loss: float = 0.0
    pg_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0  # mean token entropy of the replies (computed when entropy_coef > 0)
    clip_frac: float = 0.0
    grad_norm: float = 0.0
    updates: int = 0
    sequences: int = 0


def update_policy(
    config: TrainConfig,
    policy: Policy,
    reference: Any,
    optimizer: Any,
    samples: Sequence[TurnSample],
    advantages: np.ndarray,
    step: int,
) -> UpdateStats:
    import torch

    # Each reply token carries its turn's advantage (a sample holds one turn, or a seat's
    # conversation). A sample whose advantages are all 0 adds no policy gradient; without
    # a KL term it adds nothing.
    token_advantages = [_token_advantages(s, i, advantages) for i, s in enumerate(samples)]
    chosen = [
        i
        for i, sample in enumerate(samples)
        if _adds_to_loss(config, sample, bool(token_advantages[i].any()))
    ]
    stats = UpdateStats(sequences=len(chosen))
    if not chosen:
        return stats
    if policy.adapter is not None:  # one base shared by several adapters: train this one
        policy.model.set_adapter(policy.adapter)
    batch_samples = [samples[i] for i in chosen]
    batch_advantages = [token_advantages[i] for i in chosen]
    size = min(config.minibatch_turns, len(chosen))
    minibatches_per_epoch = math.ceil(len(chosen) / size)
    total_updates = config.ppo_epochs * minibatches_per_epoch
    model = policy.model
    temperature = config.temperature
    # With a single update, the old policy is the current one: its log-probs are the detached
    # ones of the same forward pass. Otherwise they are computed once, before any update.
    old = (
        sequence_log_probs(config, policy.pad_id, model, batch_samples)
        if total_updates > 1
        else None
    )
    reference_log_probs = (
        sequence_log_probs(config, policy.pad_id, reference, batch_samples)
        if reference is not None
        else None
    )
    order_generator = step_generator(config.seed, step, 1)
    clipped_tokens = tokens = 0.0
    for _ in range(config.ppo_epochs):
        order = torch.randperm(len(chosen), generator=order_generator).tolist()
        for start in range(0, len(order), size):
            minibatch = order[start : start + size]
            optimizer.zero_grad(set_to_none=True)
            loss_sum = pg_sum = kl_sum = entropy_sum = 0.0
            for micro in _micro_batches(minibatch, batch_samples):
                packed = pack_rows(
                    [batch_samples[i].prompt_ids for i in micro],
                    [batch_samples[i].completion_ids for i in micro],
                    policy.pad_id,
                    [batch_samples[i].loss_mask for i in micro],
                )
                log_probs, entropy = batch_log_probs_and_entropy(
                    model, packed, temperature, with_entropy=config.entropy_coef > 0
                )
                old_lp = (
                    _aligned(old, micro, packed.keep) if old is not None else log_probs.detach()
                )
                ref_lp = (
                    _aligned(reference_log_probs, micro, packed.keep)
                    if reference_log_probs is not None
                    else None
                )
                terms = ppo_loss(
                    log_probs,
                    old_lp,
                    _aligned(batch_advantages, micro, packed.keep),
                    packed.mask,
                    clip_ratio=config.clip_ratio,
                    dual_clip=config.dual_clip,
                    ref_log_probs=ref_lp,
                    kl_coef=config.kl_coef,
                    num_sequences=len(minibatch),
                    entropy=entropy,
                    entropy_coef=config.entropy_coef,
                )
                terms.loss.backward()
                loss_sum += float(terms.loss.detach())
                pg_sum += terms.pg_loss
                kl_sum += terms.kl
                entropy_sum += terms.entropy
                clipped_tokens += terms.clip_frac_tokens
                tokens += terms.tokens
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            stats.loss += loss_sum
            stats.pg_loss += pg_sum
            stats.kl += kl_sum
            stats.entropy += entropy_sum
            stats.grad_norm += float(grad_norm)
            stats.updates += 1
    optimizer.zero_grad(set_to_none=True)
    stats.loss /= stats.updates
    stats.pg_loss /= stats.updates
    stats.kl /= stats.updates
    stats.entropy /= stats.updates
    stats.grad_norm /= stats.updates
    stats.clip_frac = clipped_tokens / tokens if tokens else 0.0
    return stats


def sequence_log_probs(
    config: TrainConfig, pad_id: int, model: Any, samples: Sequence[TurnSample]
) -> list[torch.Tensor]:
    """Per sample, the log-prob of each reply token under `model` (no gradient)."""
    import torch

    out: list[torch.Tensor] = [torch.empty(0)] * len(samples)
    with torch.no_grad():
        for micro in _micro_batches(list(range(len(samples))), samples):
            packed = pack_rows(
                [samples[i].prompt_ids for i in micro],
                [samples[i].completion_ids for i in micro],
                pad_id,
            )
            values, _ = batch_log_probs_and_entropy(
                model, packed, config.temperature, with_entropy=False
            )
            for row, index in enumerate(micro):
                length = len(samples[index].completion_ids)
                out[index] = values[row, packed.keep - length :].clone()
    return out


def _adds_to_loss(config: TrainConfig, sample: TurnSample, has_advantage: bool) -> bool:
    return bool(sample.completion_ids) and (
        config.kl_coef > 0 or config.entropy_coef > 0 or has_advantage
    )


def used_by_update(
    config: TrainConfig, samples: Sequence[TurnSample], advantages: np.ndarray, keep: np.ndarray
) -> np.ndarray:
    """Per one-turn sample (a tree branch), whether `update_policy` trains on it: kept by the
    step's selection, and adding to the loss (a reply with a non-zero advantage, or any reply
    under a KL or entropy term)."""
    return np.asarray(
        [
            bool(keep[i]) and _adds_to_loss(config, sample, float(advantages[i]) != 0.0)
            for i, sample in enumerate(samples)
        ],
        dtype=bool,
    )


def _token_advantages(sample: TurnSample, index: int, advantages: np.ndarray) -> torch.Tensor:
    """Per completion token of `sample`, the advantage of the turn whose reply it is (0 between
    replies); a sample without `rows` is turn row `index`, its whole completion the reply."""
    import torch

    values = torch.zeros(len(sample.completion_ids), dtype=torch.float32)
    rows = sample.rows or (index,)
    spans = sample.spans or ((0, len(sample.completion_ids)),)
    for row, (start, end) in zip(rows, spans, strict=True):
        values[start:end] = float(advantages[row])
    return values


def _prompt_groups(indices: list[int], samples: Sequence[TurnSample]) -> list[list[int]]:
    """`indices` grouped by identical prompt, groups and members in first-seen order."""
    distinct, rows = distinct_prompts([samples[i].prompt_ids for i in indices])
    groups: list[list[int]] = [[] for _ in distinct]
    for index, group in zip(indices, rows, strict=True):
        groups[group].append(index)
    return groups


def _micro_batches(indices: list[int], samples: Sequence[TurnSample]) -> list[list[int]]:
    """Split `indices` into chunks under MICRO_BATCH_TOKENS: rows with the same prompt together
    (their prompt is run once), groups sorted by length to pad little."""

    def length(index: int) -> int:
        return len(samples[index].prompt_ids) + len(samples[index].completion_ids)

    pieces: list[list[int]] = []
    for group in _prompt_groups(indices, samples):
        longest = max(length(i) for i in group)
        rows = max(1, MICRO_BATCH_TOKENS // max(1, longest))  # a group too big is split
        pieces.extend(group[start : start + rows] for start in range(0, len(group), rows))
    pieces.sort(key=lambda piece: max(length(i) for i in piece))
    chunks: list[list[int]] = []
    current: list[int] = []
    width = 0
    for piece in pieces:
        longest = max(length(i) for i in piece)
        if current and max(width, longest) * (len(current) + len(piece)) > MICRO_BATCH_TOKENS:
            chunks.append(current)
            current, width = [], 0
        current.extend(piece)
        width = max(width, longest)
    if current:
        chunks.append(current)
    return chunks


def _aligned(values: list[torch.Tensor], rows: list[int], keep: int) -> torch.Tensor:
    """Right-align per-sample token values into a [len(rows), keep] tensor (zeros elsewhere)."""
    import torch

    out = torch.zeros((len(rows), keep))
    for row, index in enumerate(rows):
        length = values[index].shape[0]
        if length:
            out[row, keep - length :] = values[index]
    return out
