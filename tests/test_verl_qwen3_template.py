"""Whole-game samples with a Qwen3-like chat template (tests/data/qwen3_like_chat_template.jinja,
written from Qwen3's behaviour): earlier assistant turns lose their reasoning when a chat is
rendered again, so a conversation sample rebuilt by re-rendering would not hold the tokens the
model was sent and produced. The agent loop grows each seat's chat token by token instead; this
checks that the training tokens are exactly the rollout server's inputs and outputs."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from verl_testkit import ScriptedServer, first_legal, make_loop, tiny_tokenizer

from train_backend.verl import names

TEMPLATE = Path(__file__).parent / "data" / "qwen3_like_chat_template.jinja"
REASONING = "the first option is fine"  # what first_legal thinks before every answer


@functools.cache
def qwen3_like_tokenizer() -> Any:
    tokenizer = copy.deepcopy(tiny_tokenizer())
    tokenizer.chat_template = TEMPLATE.read_text()
    return tokenizer


def test_the_template_drops_earlier_reasoning_and_opens_an_assistant_turn() -> None:
    tokenizer = qwen3_like_tokenizer()
    chat = [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "<think>r1</think>\n<answer>a</answer>"},
    ]
    last = tokenizer.apply_chat_template(chat, tokenize=False)
    assert last.endswith(
        "<|im_start|>assistant\n<think>\nr1\n</think>\n\n<answer>a</answer><|im_end|>\n"
    )
    again = tokenizer.apply_chat_template(
        [*chat, {"role": "user", "content": "U2"}], tokenize=False, add_generation_prompt=True
    )
    assert "r1" not in again and "<|im_start|>assistant\n<answer>a</answer><|im_end|>" in again
    assert again.endswith("<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n")
    no_thinking = tokenizer.apply_chat_template(
        chat[:1], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert no_thinking.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("game", ["tic_tac_toe", "mini_hanabi"])
async def test_a_whole_game_sample_is_exactly_what_was_sent_and_what_came_back(game: str) -> None:
    tokenizer = qwen3_like_tokenizer()
    server = ScriptedServer(first_legal)
    outputs = await make_loop(server, tokenizer=tokenizer).run(
        {"temperature": 1.0}, game=game, seed=3, prompt_style="full", invalid="penalty",
        sample_unit="conversation", uid="q", session_id=0,
    )  # fmt: skip
    assert [o.extra_fields[names.SEAT] for o in outputs] == [0, 1]
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for output in outputs:
        seat = output.extra_fields[names.SEAT]
        calls = [r for r in server.requests if r["request_id"] == f"q_0-seat{seat}"]
        spans = output.extra_fields[names.SPANS]
        assert len(calls) == len(spans) >= 2  # several turns: earlier replies are re-sent
        sequence = output.prompt_ids + output.response_ids
        for call, (start, end) in zip(calls, spans, strict=True):
            # the server saw exactly the sample up to this reply, and its reply is in the
            # sample token for token, ending in the end-of-turn token
            assert call["prompt_ids"] == sequence[: len(output.prompt_ids) + start]
            assert output.response_ids[start:end] == call["token_ids"]
            assert output.response_ids[end - 1] == end_of_turn
        # Every reply's reasoning is in the sample, where a re-render drops the earlier ones.
        text = tokenizer.decode(sequence)
        assert text.count(REASONING) == len(spans)
        chat = _chat_of(tokenizer.decode(calls[-1]["prompt_ids"]))
        rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert rendered.count(REASONING) == 0
        assert tokenizer.decode(calls[-1]["prompt_ids"]).count(REASONING) == len(spans) - 1


def _chat_of(text: str) -> list[dict[str, str]]:
    """ChatML text back into messages (the assistant turns with their reasoning)."""
    messages = []
    for block in text.split("<|im_start|>")[1:]:
        role, _, content = block.partition("\n")
        content = content.removesuffix("\n").removesuffix("<|im_end|>")
        if content or role != "assistant":
            messages.append({"role": role, "content": content})
    return messages
