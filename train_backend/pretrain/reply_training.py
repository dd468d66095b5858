"""A recipe's training on replies: its examples as token rows, its batches and its schedule, run by
the one reply fine-tuning loop (`core.reply_tuning`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from core.reply_tuning import Row, fine_tune_on_replies
from train_backend.pretrain.format_data import Example
from train_backend.pretrain.format_eval import prompt_ids
from train_backend.pretrain.recipe import PretrainSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def encode_examples(
    tokenizer: PreTrainedTokenizerBase, examples: Sequence[Example], settings: PretrainSettings
) -> list[Row]:
    """Prompt ids by the chat template, then the reply and the end-of-turn token.

    Full-style prompts longer than `full_prompt_tokens` are left out, not cut: a model trained on
    windows cut from longer prompts learnt nothing that carried over to whole prompts (measured:
    compact prompts cut to their last 72 tokens gave 2-35% legal moves on whole prompts).
    """
    rows: list[Row] = []
    eos = tokenizer.eos_token
    for example in examples:
        prompt = prompt_ids(tokenizer, example.messages)
        if example.style == "full" and len(prompt) > settings.full_prompt_tokens:
            continue
        reply = tokenizer(example.reply + eos, add_special_tokens=False)["input_ids"]
        rows.append((prompt + list(reply), len(prompt)))
    return rows


LONG_ROW_TOKENS = 320


def _batches(rows: Sequence[Row], batch_size: int, generator: Any) -> Iterator[list[int]]:
    """Endless seeded shuffled passes over the rows, in batches.

    Long rows (the full-style prompts) are batched among themselves, so that one of them does not
    pad fifteen short rows to its width; short rows are batched at random (batches sorted by
    length learnt the Tic-Tac-Toe lookup no faster in our runs, and a batch of alike positions
    is a narrower sample).
    """
    import torch

    while True:
        order = torch.randperm(len(rows), generator=generator).tolist()
        short = [i for i in order if len(rows[i][0]) <= LONG_ROW_TOKENS]
        long = [i for i in order if len(rows[i][0]) > LONG_ROW_TOKENS]
        batches = [
            group[i : i + batch_size]
            for group in (short, long)
            for i in range(0, len(group), batch_size)
        ]
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[index]


def train_on_replies(
    model: PreTrainedModel,
    rows: Sequence[Row],
    settings: PretrainSettings,
    pad_id: int,
    on_step: Callable[[int, float], None] | None = None,
    stop_below: float | None = None,
) -> list[float]:
    """The recipe's run of `core.reply_tuning.fine_tune_on_replies`: AdamW at the recipe's rate,
    warm-up / constant / linear decay, batches drawn in seeded shuffled passes; `stop_below` ends
    a stage once its loss has fallen (see there)."""
    import torch

    if settings.steps == 0 or not rows:
        return []
    generator = torch.Generator().manual_seed(settings.seed)
    steps, warmup = settings.steps, settings.warmup_steps
    decay_from = steps - round(steps * settings.decay_share)

    def factor(step: int) -> float:
        # Warm-up, a long constant stretch, then a linear decay: copying a label out of the
        # prompt is learnt late and suddenly, so the rate stays high until near the end.
        if step < warmup:
            return (step + 1) / warmup
        if step < decay_from:
            return 1.0
        return max(0.05, (steps - step) / max(1, steps - decay_from))

    return fine_tune_on_replies(
        model,
        rows,
        _batches(rows, settings.batch_size, generator),
        steps=steps,
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        lr_factor=factor,
        pad_id=pad_id,
        on_step=on_step,
        stop_below=stop_below,
    )
