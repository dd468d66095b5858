"""One seat's whole game as one token sequence: the sample `sample_unit: conversation` trains on.

With `full` prompts a seat's chat grows turn by turn. Re-rendering it each turn would show the
model its earlier replies as the arena keeps them (answers only); here the seat's context is kept
as tokens instead: the first prompt, then every reply's generated tokens verbatim (reasoning
included) and, after each, only what the game added since (the next user message and the
generation prompt), rendered by the model's chat template. What the model saw at every turn is
then a prefix of one sequence, so the update can score all of a seat's replies in one pass, with
the prompts, observations and the opponent's moves masked out (as the MARSHAL code does).

The continuation is found by the suffix-difference of two renders (as verl's continuous-token
builder does): the template applied to a short synthetic chat with and without the new messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.errors import MarsError

if TYPE_CHECKING:
    from core.causal_lm import Message, Policy

_SYSTEM = {"role": "system", "content": "mars synthetic system"}
_USER = {"role": "user", "content": "mars synthetic user"}
_SENTINEL = "\u2063mars reply\u2063"


@dataclass
class SeatConversation:
    """A seat's tokens so far; `mask` and `spans` index the tokens after the first prompt."""

    prompt_ids: list[int]
    tokens: list[int]
    sent: int  # messages in the chat the last call was given
    mask: list[int] = field(default_factory=list)  # 1 on the seat's own reply tokens
    spans: list[tuple[int, int]] = field(default_factory=list)  # each reply's [start, end)

    @property
    def completion_ids(self) -> list[int]:
        return self.tokens[len(self.prompt_ids) :]


class ChatContinuation:
    """Renders a seat's next prompt as its last context, its reply, and what followed it."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.after_stop = self._after_stop_tokens()

    def _render(self, messages: list[Message], generation: bool) -> str:
        return self.policy.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation, tokenize=False
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.policy.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _after_stop_tokens(self) -> dict[int, list[int]]:
        """Per stop token, what the template writes after it to close an assistant turn (the
        newline after Qwen's `<|im_end|>`): a reply that stopped there gets it appended."""
        reply = {"role": "assistant", "content": _SENTINEL}
        rendered = self._render([_SYSTEM, _USER, reply], False)
        closing = rendered.rsplit(_SENTINEL, 1)[-1] if _SENTINEL in rendered else ""
        found = {}
        for stop in self.policy.stop_ids:
            text = self.policy.tokenizer.decode([stop])
            if text and closing.startswith(text) and closing[len(text) :]:
                found[stop] = self._encode(closing[len(text) :])
        return found

    def start(self, messages: list[Message]) -> SeatConversation:
        prompt_ids = self.policy.encode_chat(messages)
        return SeatConversation(list(prompt_ids), list(prompt_ids), sent=len(messages))

    def next_prompt(self, chat: SeatConversation, messages: list[Message]) -> list[int]:
        """Extend `chat` with what the game added after the seat's last reply."""
        # The engine put the seat's last reply (as the arena keeps it) after the messages it sent
        # last; that reply's own tokens are already in `chat.tokens`.
        added = messages[chat.sent + 1 :]
        if len(messages) < chat.sent + 1 or messages[chat.sent]["role"] != "assistant":
            raise MarsError("a seat's chat did not grow by its reply: it is not one conversation")
        base = self._render([_SYSTEM, _USER], False)
        full = self._render([_SYSTEM, _USER, *added], True)
        if not full.startswith(base):
            raise MarsError("the chat template does not extend a chat by appending to it")
        last = chat.tokens[-1] if chat.tokens else None
        bridge = self.after_stop.get(last, []) if chat.spans else []
        delta = bridge + self._encode(full[len(base) :])
        chat.tokens += delta
        chat.mask += [0] * len(delta)
        chat.sent = len(messages)
        return list(chat.tokens)

    @staticmethod
    def add_reply(chat: SeatConversation, reply_ids: list[int]) -> None:
        start = len(chat.mask)
        chat.tokens += reply_ids
        chat.mask += [1] * len(reply_ids)
        chat.spans.append((start, start + len(reply_ids)))
