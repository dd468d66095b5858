"""The PPO-clip objective on per-token log-probabilities, and how those log-probs are computed.

For completion token t of sequence i, with r = exp(logp - logp_old) and A_i the turn's advantage:

    pg_t   = max(-A r, -A clip(r, 1 - eps, 1 + eps))             PPO clip (eps = clip_ratio)
    pg_t   = min(pg_t, -A c)          when A < 0 and dual_clip c  dual clip: bounds the loss of a
                                                                  negative-advantage token whose
                                                                  ratio has grown very large
    kl_t   = exp(ref - logp) - (ref - logp) - 1                   k3 estimate of KL(pi || ref)
    H_t    = -sum_v pi(v) log pi(v)                               entropy of the next-token
                                                                  distribution (temperature-scaled)
    loss_t = pg_t + kl_coef * kl_t - entropy_coef * H_t

    loss   = mean over sequences of (mean over the sequence's completion tokens of loss_t)

("token mean per sequence, then mean over sequences", as MARSHAL's code does). `clip_frac` is the
fraction of completion tokens whose clipped term was the larger one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

KL_CLAMP = 10.0  # per-token k3 values are capped, as verl does, so one outlier cannot dominate


@dataclass
class LossTerms:
    loss: torch.Tensor  # differentiable; the sum over this batch's sequences / `num_sequences`
    pg_loss: float  # same reduction, detached
    kl: float
    clip_frac_tokens: float  # clipped tokens (count), for a token-weighted fraction over batches
    tokens: float  # completion tokens counted
    entropy: float = 0.0  # same reduction as pg_loss (0 when not computed)


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row mean over the masked positions; a row without tokens gives 0."""
    return (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    import torch

    log_ratio = ref_log_probs - log_probs
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, max=KL_CLAMP)


def ppo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    dual_clip: float | None = None,
    ref_log_probs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    num_sequences: int | None = None,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> LossTerms:
    """The loss of a batch of sequences ([B, T] tensors; `advantages` is [B] or [B, T]).

    `num_sequences` divides the per-sequence sum (default B): give the minibatch's size when a
    minibatch is split into micro-batches whose gradients are accumulated.
    """
    import torch

    mask = mask.to(log_probs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(log_probs)
    advantages = advantages.to(log_probs.dtype)
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    pg = torch.maximum(unclipped, clipped)
    was_clipped = (clipped > unclipped).to(log_probs.dtype)
    if dual_clip is not None:
        bounded = torch.minimum(pg, -advantages * dual_clip)
        pg = torch.where(advantages < 0, bounded, pg)
    per_token = pg
    kl_value = 0.0
    if ref_log_probs is not None:
        kl = k3_kl(log_probs, ref_log_probs)
        if kl_coef:
            per_token = per_token + kl_coef * kl
        kl_value = float(sequence_mean(kl.detach(), mask).sum())
    entropy_value = 0.0
    if entropy is not None:
        if entropy_coef:
            per_token = per_token - entropy_coef * entropy
        entropy_value = float(sequence_mean(entropy.detach(), mask).sum())
    denominator = num_sequences if num_sequences is not None else log_probs.shape[0]
    loss = sequence_mean(per_token, mask).sum() / denominator
    pg_value = float(sequence_mean(pg.detach(), mask).sum()) / denominator
    return LossTerms(
        loss=loss,
        pg_loss=pg_value,
        kl=kl_value / denominator,
        clip_frac_tokens=float((was_clipped * mask).sum()),
        tokens=float(mask.sum()),
        entropy=entropy_value / denominator,
    )


@dataclass
class PackedBatch:
    """Sequences (prompt + completion) left-padded so that every completion ends in the last column.

    `targets[i, j]` is the token predicted at logit column j; `mask` marks completion tokens.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    keep: int  # logits needed: the last `keep` positions


def pack(
    prompts: Sequence[list[int]],
    completions: Sequence[list[int]],
    pad_id: int,
    loss_masks: Sequence[Sequence[int] | None] | None = None,
) -> PackedBatch:
    """`loss_masks` (per row, one value per completion token; None: all 1) keeps tokens of a
    completion out of `mask`: a seat's conversation holds the context between its replies."""
    import torch

    lengths = [len(p) + len(c) for p, c in zip(prompts, completions, strict=True)]
    keep = max(1, max(len(c) for c in completions))
    width = max(*lengths, keep + 1)  # at least one column before the first predicting one
    rows = len(prompts)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    targets = torch.full((rows, keep), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, keep), dtype=torch.float32)
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        sequence = prompt + completion
        if sequence:
            input_ids[row, width - len(sequence) :] = torch.tensor(sequence)
            attention[row, width - len(sequence) :] = 1
        if completion:
            targets[row, keep - len(completion) :] = torch.tensor(completion)
            kept = loss_masks[row] if loss_masks is not None else None
            mask[row, keep - len(completion) :] = 1.0 if kept is None else torch.tensor(kept)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    return PackedBatch(input_ids, attention, positions, targets, mask, keep)


def token_log_probs(
    model: PreTrainedModel, batch: PackedBatch, temperature: float = 1.0
) -> torch.Tensor:
    """log pi(token) for every completion position ([B, keep]; garbage where mask is 0).

    The logits are divided by the sampling temperature (when > 0), so the ratio compares the
    distributions the tokens were actually drawn from, as verl does. Logits are computed only for
    the last `keep + 1` positions: the columns that predict completion tokens.
    """
    return token_log_probs_and_entropy(model, batch, temperature, with_entropy=False)[0]


def token_log_probs_and_entropy(
    model: PreTrainedModel,
    batch: PackedBatch,
    temperature: float = 1.0,
    *,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_log_probs`, and the entropy of each position's next-token distribution."""
    import torch

    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=batch.keep + 1,
    )
    logits = out.logits[:, :-1, :].float()  # column j predicts the token at width - keep + j
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    chosen = log_probs.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return chosen, None
    return chosen, -(log_probs.exp() * log_probs).sum(dim=-1)


@dataclass
class SharedPromptBatch:
    """Rows whose prompts repeat (the K branches of a tree node) with each prompt stored once.

    `prompt_ids` [U, P] holds the distinct prompts, left-padded; `prompt_of[i]` is row i's prompt.
    `completion_ids` [B, keep] holds the completions left-padded, so that every completion ends in
    the last column as in `PackedBatch`; `mask` marks the completion tokens that count.
    """

    prompt_ids: torch.Tensor
    prompt_attention: torch.Tensor
    prompt_of: torch.Tensor
    completion_ids: torch.Tensor
    completion_attention: torch.Tensor
    mask: torch.Tensor
    keep: int


def distinct_prompts(prompts: Sequence[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts in first-seen order, and each row's index among them."""
    index: dict[tuple[int, ...], int] = {}
    distinct: list[list[int]] = []
    rows = []
    for prompt in prompts:
        key = tuple(prompt)
        if key not in index:
            index[key] = len(distinct)
            distinct.append(list(prompt))
        rows.append(index[key])
    return distinct, rows


def pack_shared(
    prompts: Sequence[list[int]],
    completions: Sequence[list[int]],
    pad_id: int,
    loss_masks: Sequence[Sequence[int] | None] | None = None,
) -> SharedPromptBatch:
    """`pack` for rows that share prompts: every distinct prompt non-empty, every completion too."""
    import torch

    distinct, rows = distinct_prompts(prompts)
    width = max(len(p) for p in distinct)
    keep = max(len(c) for c in completions)
    prompt_ids = torch.full((len(distinct), width), pad_id, dtype=torch.long)
    prompt_attention = torch.zeros((len(distinct), width), dtype=torch.long)
    for row, prompt in enumerate(distinct):
        prompt_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        prompt_attention[row, width - len(prompt) :] = 1
    completion_ids = torch.full((len(completions), keep), pad_id, dtype=torch.long)
    completion_attention = torch.zeros((len(completions), keep), dtype=torch.long)
    mask = torch.zeros((len(completions), keep), dtype=torch.float32)
    for row, completion in enumerate(completions):
        completion_ids[row, keep - len(completion) :] = torch.tensor(completion)
        completion_attention[row, keep - len(completion) :] = 1
        kept = loss_masks[row] if loss_masks is not None else None
        mask[row, keep - len(completion) :] = 1.0 if kept is None else torch.tensor(kept)
    return SharedPromptBatch(
        prompt_ids,
        prompt_attention,
        torch.tensor(rows, dtype=torch.long),
        completion_ids,
        completion_attention,
        mask,
        keep,
    )


def shared_prompt_log_probs_and_entropy(
    model: PreTrainedModel,
    batch: SharedPromptBatch,
    temperature: float = 1.0,
    *,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_log_probs_and_entropy` with each distinct prompt run once (gradients included).

    The prompts' keys and values are computed once, copied to their rows, and the completions
    attend to them. Completions are left-padded, so padding sits between a prompt and its
    completion: the first completion token is predicted by the prompt's last position, the
    others by the completion's own positions. Same values as `pack` + the plain forward.
    """
    import torch
    from transformers import DynamicCache

    from core.batcher import cache_keyword

    cache = DynamicCache()  # filled in place by the prompt pass
    cache_arg = cache_keyword(model)
    prompt_out = model(
        input_ids=batch.prompt_ids,
        attention_mask=batch.prompt_attention,
        position_ids=(batch.prompt_attention.cumsum(dim=1) - 1).clamp(min=0),
        use_cache=True,
        logits_to_keep=1,
        **{cache_arg: cache},
    )
    cache.reorder_cache(batch.prompt_of)  # index_select: one copy per row, gradients flow back
    attention = torch.cat([batch.prompt_attention[batch.prompt_of], batch.completion_attention], 1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)[:, -batch.keep :]
    out = model(
        input_ids=batch.completion_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=False,
        **{cache_arg: cache},
    )
    first = prompt_out.logits[batch.prompt_of, -1:, :]  # predicts each completion's first token
    shifted = torch.cat([first, out.logits[:, :-1, :]], dim=1)
    lengths = batch.completion_attention.sum(dim=1)
    columns = torch.arange(batch.keep)
    starts = (batch.keep - lengths).unsqueeze(1)
    logits = torch.where((columns == starts).unsqueeze(-1), first, shifted).float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    chosen = log_probs.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return chosen, None
    return chosen, -(log_probs.exp() * log_probs).sum(dim=-1)


def pack_rows(
    prompts: Sequence[list[int]],
    completions: Sequence[list[int]],
    pad_id: int,
    loss_masks: Sequence[Sequence[int] | None] | None = None,
) -> PackedBatch | SharedPromptBatch:
    """`pack_shared` when some prompts repeat (and none is empty), else `pack`."""
    repeated = len(distinct_prompts(prompts)[0]) < len(prompts)
    if repeated and all(prompts) and all(completions):
        return pack_shared(prompts, completions, pad_id, loss_masks)
    return pack(prompts, completions, pad_id, loss_masks)


def batch_log_probs_and_entropy(
    model: PreTrainedModel,
    batch: PackedBatch | SharedPromptBatch,
    temperature: float = 1.0,
    *,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per completion token of either kind of batch: log pi(token), and the entropy if asked."""
    if isinstance(batch, SharedPromptBatch):
        return shared_prompt_log_probs_and_entropy(
            model, batch, temperature, with_entropy=with_entropy
        )
    return token_log_probs_and_entropy(model, batch, temperature, with_entropy=with_entropy)
