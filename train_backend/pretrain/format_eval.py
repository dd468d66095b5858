"""How often a model in this process answers with a legal move (and, for arithmetic, a box).

Replies are generated greedily (temperature 0, as `mars arena` asks by default) from the prompts of
held-out positions, decoded, and read by `games.parsing.parse_move` against the position's legal
labels: exactly the rule the arena applies to a served model.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from games.parsing import parse_move
from harness.benchmarks.extraction import last_boxed
from train_backend.pretrain.format_data import Example

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EVAL_MAX_NEW_TOKENS = 96
EVAL_BATCH = 32


def prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of the chat as the model's chat template renders it, ending with the reply cue."""
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> list[int]:
    ids = model.generation_config.eos_token_id
    found = list(ids) if isinstance(ids, list) else ([ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in found:
        found.append(tokenizer.eos_token_id)
    return found


def generate_replies(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    chats: Sequence[Sequence[dict[str, str]]],
    *,
    max_new_tokens: int = EVAL_MAX_NEW_TOKENS,
    batch_size: int = EVAL_BATCH,
    temperature: float = 0.0,
) -> list[str]:
    """Replies in the order of `chats`, greedy (`temperature` 0) or sampled at `temperature`
    from the whole distribution (no top-p or top-k: torch's global generator, so seed it);
    batched by prompt length to waste little padding."""
    import torch
    from transformers.utils import logging as hf_logging

    encoded = [prompt_ids(tokenizer, chat) for chat in chats]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    stops = stop_token_ids(tokenizer, model)
    # The model's own defaults minus its sampling settings (which greedy decoding rejects).
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.temperature, config.top_p, config.top_k = False, None, None, None
    if temperature > 0:
        config.do_sample, config.temperature, config.top_p, config.top_k = True, temperature, 1.0, 0
    config.max_new_tokens = max_new_tokens
    config.eos_token_id, config.pad_token_id = stops, pad_id
    replies: list[str] = [""] * len(encoded)
    was_training = model.training
    model.eval()
    verbosity = hf_logging.get_verbosity()
    # transformers fills unset fields from the model's sampling defaults and then warns that
    # they do not apply to greedy decoding.
    hf_logging.set_verbosity_error()
    try:
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                width = max(len(encoded[i]) for i in rows)
                input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
                attention = torch.zeros((len(rows), width), dtype=torch.long)
                for r, i in enumerate(rows):  # left padding: every reply starts at column `width`
                    ids = encoded[i]
                    input_ids[r, width - len(ids) :] = torch.tensor(ids)
                    attention[r, width - len(ids) :] = 1
                output = model.generate(
                    input_ids=input_ids, attention_mask=attention, generation_config=config
                )
                for r, i in enumerate(rows):
                    replies[i] = tokenizer.decode(output[r, width:], skip_special_tokens=True)
    finally:
        hf_logging.set_verbosity(verbosity)
        model.train(was_training)
    return replies


def score_reply(example: Example, reply: str) -> tuple[bool, bool]:
    """(format ok, answer right). Games: a legal move, for both. Arithmetic: a `\\boxed{}`
    answer at all, and whether it holds the right number or letter."""
    if example.kind == "arithmetic":
        boxed = last_boxed(reply)
        return boxed is not None, (boxed or "").strip() == example.answer
    legal = parse_move(reply, list(example.legal), numbered=example.style == "numbered").ok
    return legal, legal


def reply_rates(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Example],
    *,
    seen_prompts: set[str] | None = None,
    samples_per_group: int = 2,
) -> dict[str, dict[str, Any]]:
    """Per "kind/style": n, ok, rate (legal moves; boxed answers), correct, the number of
    prompts also seen in training, and a few sample replies."""
    replies = generate_replies(model, tokenizer, [e.messages for e in examples])
    groups: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"n": 0, "ok": 0, "correct": 0, "seen_in_training": 0, "samples": []}
    )
    for example, reply in zip(examples, replies, strict=True):
        group = groups[f"{example.kind}/{example.style}"]
        ok, correct = score_reply(example, reply)
        group["n"] += 1
        group["ok"] += int(ok)
        group["correct"] += int(correct)
        if seen_prompts is not None and prompt_key(example) in seen_prompts:
            group["seen_in_training"] += 1
        if len(group["samples"]) < samples_per_group:
            group["samples"].append({"reply": reply, "ok": ok})
    for group in groups.values():
        group["rate"] = round(group["ok"] / group["n"], 4) if group["n"] else 0.0
    return dict(sorted(groups.items()))


def prompt_key(example: Example) -> str:
    """The whole chat as one string: equal keys mean the model saw exactly this prompt."""
    return "\x00".join(m["content"] for m in example.messages)
