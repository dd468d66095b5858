"""Scripted model players for tests and demos: replies decided by a function, no model needed."""

from __future__ import annotations

from collections.abc import Callable

from core.endpoint import Completion, Usage
from games.players.llm import FunctionPlayer
from games.prompts import legal_actions_in

# script(legal labels shown in the prompt, seat, call number of this seat in the episode) -> reply
Script = Callable[[list[str], int, int], str]


def scripted_player(script: Script, name: str = "scripted") -> FunctionPlayer:
    """A model seat whose reply text is `script(...)`; usage counts words as tokens."""
    calls: dict[tuple[int, int], int] = {}

    async def respond(messages: list[dict[str, str]], seat: int, seed: int) -> Completion:
        index = calls.get((seed, seat), 0)
        calls[(seed, seat)] = index + 1
        text = script(legal_actions_in(messages[-1]["content"]), seat, index)
        usage = Usage(
            prompt_tokens=sum(len(m["content"].split()) for m in messages),
            completion_tokens=len(text.split()),
        )
        return Completion(text=text, usage=usage, finish_reason="stop")

    return FunctionPlayer(respond, name=name)


def first_legal(legal: list[str], seat: int, call: int) -> str:
    return f"I take the first option.\n<answer>{legal[0]}</answer>"
