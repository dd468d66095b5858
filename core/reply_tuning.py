"""Fine-tuning a causal LM on its replies only: the one loop of every supervised training here.

A row is (token ids of prompt + reply, prompt length): the loss falls on the reply tokens only,
so the capacity goes into the reply and not into memorising prompts. The embedded tiny model's
own pre-training (`core.tiny_model`) and the format pre-trainings of start models
(`train_backend.pretrain`) both run `fine_tune_on_replies`; each brings its own batches (which
rows, in which order) and its own learning-rate schedule.

torch is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel

Row = tuple[list[int], int]  # token ids (prompt + reply), prompt length
Loss = Callable[["PreTrainedModel", Any, Any, Any], Any]  # (model, ids, attention, labels)
STOP_WINDOW = 25  # steps whose mean loss `stop_below` compares


def pad_reply_batch(examples: Sequence[Row], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-padded (input_ids, labels, attention); labels are -100 outside each reply.

    Each example is (token ids, prompt length): the loss falls on the reply tokens only.
    """
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, prompt_len) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:])
        attention[row, : len(ids)] = 1
    return input_ids, labels, attention


def model_loss(model: PreTrainedModel, input_ids: Any, attention: Any, labels: Any) -> Any:
    """The model's own causal-LM loss on the labelled (reply) tokens."""
    return model(input_ids=input_ids, attention_mask=attention, labels=labels).loss


def reply_loss(model: PreTrainedModel, input_ids: Any, attention: Any, labels: Any) -> Any:
    """Cross-entropy on the reply tokens only, the output layer run only where a reply token is
    predicted (a few percent of positions) instead of over the whole padded batch: about a sixth
    less work per step for the tiny model. Another architecture takes the plain path."""
    import torch

    body, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if body is None or head is None:
        return model_loss(model, input_ids, attention, labels)
    hidden = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
    targets = labels[:, 1:]
    picked = targets != -100
    logits = head(hidden[:, :-1][picked])
    return torch.nn.functional.cross_entropy(logits.float(), targets[picked])


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch on `count` threads inside the block (1: the same bytes on any machine, since the
    reduction order depends on the thread count), the caller's count again after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _learnt(losses: list[float], stop_below: float) -> bool:
    recent = losses[-STOP_WINDOW:]
    return len(recent) == STOP_WINDOW and sum(recent) / STOP_WINDOW < stop_below


def fine_tune_on_replies(
    model: PreTrainedModel,
    rows: Sequence[Row],
    batches: Iterator[Sequence[int]],
    *,
    steps: int,
    learning_rate: float,
    weight_decay: float,
    lr_factor: Callable[[int], float],
    pad_id: int,
    loss: Loss = reply_loss,
    on_step: Callable[[int, float], None] | None = None,
    stop_below: float | None = None,
) -> list[float]:
    """`steps` AdamW updates, each on the rows `next(batches)` names, the learning rate scaled by
    `lr_factor(step)`, gradients clipped to norm 1; returns the losses. The model is in training
    mode during the loop and in eval mode after it.

    `on_step(step, loss)` follows each update. With `stop_below`, training ends early once the
    mean loss of the last STOP_WINDOW steps is under it: for a stage that teaches one mechanism
    (copying), learnt suddenly at a step that differs from run to run, so that `steps` is a
    bound, not a guess.
    """
    import torch

    if steps == 0 or not rows:
        return []
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    losses: list[float] = []
    model.train()
    try:
        for step in range(steps):
            batch = [rows[i] for i in next(batches)]
            input_ids, labels, attention = pad_reply_batch(batch, pad_id)
            value = loss(model, input_ids, attention, labels)
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(value.detach()))
            if on_step is not None:
                on_step(step + 1, losses[-1])
            if stop_below is not None and _learnt(losses, stop_below):
                break
    finally:
        model.eval()
    return losses
