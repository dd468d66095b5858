"""Fine-tuning a causal LM on its replies only: token rows, batches, the loss, the optimizer."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from core.tiny_model import pad_reply_batch
from train_backend.format_data import Example
from train_backend.format_eval import prompt_ids
from train_backend.pretrain_recipe import PretrainSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Row = tuple[list[int], int]  # token ids (prompt + reply), prompt length


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


def _batch_tensors(rows: Sequence[Row], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-padded ids, attention mask, and labels that are -100 outside the replies."""
    input_ids, labels, attention = pad_reply_batch(list(rows), pad_id)
    return input_ids, attention, labels


def _reply_loss(model: PreTrainedModel, input_ids: Any, attention: Any, labels: Any) -> Any:
    """Cross-entropy on the reply tokens only.

    The output layer runs only where a reply token is predicted (a few percent of positions)
    instead of over the whole padded batch: about a sixth less work per step for the tiny model.
    """
    import torch

    body, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if body is None or head is None:  # another architecture: the plain (dearer) path
        return model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    hidden = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
    targets = labels[:, 1:]
    picked = targets != -100
    logits = head(hidden[:, :-1][picked])
    return torch.nn.functional.cross_entropy(logits.float(), targets[picked])


LONG_ROW_TOKENS = 320
STOP_WINDOW = 25  # steps whose mean loss `stop_below` compares


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


def _learnt(losses: list[float], stop_below: float) -> bool:
    recent = losses[-STOP_WINDOW:]
    return len(recent) == STOP_WINDOW and sum(recent) / STOP_WINDOW < stop_below


def train_on_replies(
    model: PreTrainedModel,
    rows: Sequence[Row],
    settings: PretrainSettings,
    pad_id: int,
    on_step: Callable[[int, float], None] | None = None,
    stop_below: float | None = None,
) -> list[float]:
    """AdamW, warm-up / constant / linear decay; batches drawn in seeded shuffled passes.

    With `stop_below`, training ends early once the mean loss of the last STOP_WINDOW steps is
    under it: for a stage that teaches one mechanism (copying), which is learnt suddenly at a
    step that differs from run to run, so that `settings.steps` is a bound, not a guess.
    """

    import torch

    if settings.steps == 0 or not rows:
        return []
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
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

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    batches = _batches(rows, settings.batch_size, generator)
    losses: list[float] = []
    model.train()
    try:
        for step in range(steps):
            batch = next(batches)
            input_ids, attention, labels = _batch_tensors([rows[i] for i in batch], pad_id)
            loss = _reply_loss(model, input_ids, attention, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step + 1, losses[-1])
            if stop_below is not None and _learnt(losses, stop_below):
                break
    finally:
        model.eval()
    return losses
