"""Prompt rendering for model seats (never called for classic bots).

Two styles:
- `full`: what the paper does for real LLMs. One growing chat per seat: a system prompt, a first
  user message with the rules, the seat and the response instructions, then one user message per
  turn with what happened since the seat's last turn, the current state and the legal actions.
  The model's earlier replies stay in the chat.
- `compact`: one short self-contained prompt per turn (minimal rules, the state, the legal
  actions, the answer instruction), small enough for a ~1M-parameter model (< ~300 tokens).
- `numbered`: the compact prompt with the legal actions numbered (`Legal: 1 <pass> 2 <bet>`);
  the answer is a number of that list (`games.parsing.parse_move(..., numbered=True)`). A ~1M
  model cannot copy labels it never saw (an obfuscated variant's), but it can write a number of
  a list: validity no longer depends on the labels, choosing well still does.

History follows the paper: in perfect-information games the other seat's move is shown in full
(its action and the position it produced, which is the current state); otherwise only the
action it chose, never what it saw.
"""

from __future__ import annotations

import re

import pyspiel

from games.rules import PROMPT_STYLES, PromptStyle
from games.spec import GameSpec

Message = dict[str, str]
# An invalid reply echoed back in retry mode is cut to its last characters.
ECHO_LIMIT_CHARS = 2000


_LABEL = re.compile(r"<[^<>]+>")


def legal_actions_in(text: str) -> list[str]:
    """The legal action labels listed in a prompt this module rendered (the last list in it).

    For scripted test servers and fake models that see only the messages.
    """
    for line in reversed(text.splitlines()):
        if line.startswith(("Legal actions:", "Legal:")):
            return _LABEL.findall(line.partition(":")[2])
    return []


def _join(labels: list[str]) -> str:
    return ", ".join(labels)


def numbered_list(labels: list[str]) -> str:
    """`1 <pass> 2 <bet>`: each legal label after its number, counted from 1."""
    return " ".join(f"{number} {label}" for number, label in enumerate(labels, start=1))


def system_prompt(spec: GameSpec) -> str:
    if spec.cooperative:
        return (
            f"You are playing {spec.title} together with a partner. Think carefully and choose "
            "the best action every turn so that the team reaches the highest possible score."
        )
    return (
        f"You are playing {spec.title} against an opponent. Think carefully and choose the best "
        "action every turn so as to get the best possible outcome for yourself."
    )


def seat_description(spec: GameSpec, seat: int) -> str:
    other = "partner" if spec.cooperative else "opponent"
    order = "first" if seat == 0 else "second"
    return (
        f"You are {spec.seat_names[seat]} (player {seat + 1} of 2) and you move {order}. "
        f"Your {other} is {spec.seat_names[1 - seat]}."
    )


def response_instructions(example: str, retries: int) -> str:
    text = (
        "Every turn you get the current state of the game and the list of legal actions. Think "
        "the move through, then end your reply with the action you choose inside answer tags, "
        f"copied exactly from the list of legal actions, for example: <answer>{example}</answer>"
    )
    if retries > 0:
        return text + (
            f"\nIf your reply has no legal action you are told why and asked again, at most "
            f"{retries} times; after that you lose the game with a penalty."
        )
    return text + "\nA reply without a legal action loses the game at once, with a penalty."


class SeatPrompter:
    """Builds the messages one model seat sees over one episode."""

    def __init__(
        self, spec: GameSpec, seat: int, style: PromptStyle = "full", retries: int = 0
    ) -> None:
        if style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt style {style!r}")
        self.spec = spec
        self.seat = seat
        self.style = style
        self.retries = retries
        self.chat: list[Message] = []  # full style only
        self._seen = 0  # how much of the episode's action history this seat has been shown
        self._turns = 0

    @property
    def numbered(self) -> bool:
        """Whether replies answer with a number of the legal list (`parse_move(numbered=)`)."""
        return self.style == "numbered"

    def _new_moves(self, history: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """The other seat's moves since this seat last acted."""
        moves = [(actor, label) for actor, label in history[self._seen :] if actor != self.seat]
        self._seen = len(history)
        return moves

    def _events(self, moves: list[tuple[int, str]]) -> list[str]:
        other = "partner" if self.spec.cooperative else "opponent"
        lines = [f"Your {other} ({self.spec.seat_names[a]}) chose {label}." for a, label in moves]
        if lines and self.spec.perfect_information:
            lines[-1] = lines[-1][:-1] + "; the position after that move is shown below."
        return lines

    def turn_messages(
        self, state: pyspiel.State, legal_labels: list[str], history: list[tuple[int, str]]
    ) -> tuple[list[Message], int]:
        """The messages to send for this turn and how many of them earlier turns already sent."""
        self._turns += 1
        moves = self._new_moves(history)
        view = self.spec.view(state, self.seat)
        if self.style != "full":
            content = self._compact(view.compact, legal_labels, moves)
            return [{"role": "user", "content": content}], 0
        events = self._events(moves)
        parts = []
        reused = len(self.chat)
        if not self.chat:
            self.chat.append({"role": "system", "content": system_prompt(self.spec)})
            parts += [
                "# Game rules\n" + self.spec.rules,
                "# Your seat\n" + seat_description(self.spec, self.seat),
                "# How to answer\n" + response_instructions(legal_labels[0], self.retries),
            ]
        body = [f"# Turn {self._turns}", *events, "Current state:", view.state]
        body.append("Legal actions: " + _join(legal_labels))
        parts.append("\n".join(body))
        self.chat.append({"role": "user", "content": "\n\n".join(parts)})
        return list(self.chat), reused

    def _compact(
        self, state_text: str, legal_labels: list[str], moves: list[tuple[int, str]]
    ) -> str:
        lines = [self.spec.compact_rules, f"You are {self.spec.seat_names[self.seat]}."]
        if moves:
            lines.append("Other player: " + " ".join(label for _, label in moves))
        if self.numbered:
            lines += ["State:", state_text, "Legal: " + numbered_list(legal_labels)]
            lines.append("Reply <answer>NUMBER</answer>.")
        else:
            lines += ["State:", state_text, "Legal: " + " ".join(legal_labels)]
            lines.append("Reply <answer>ACTION</answer>.")
        return "\n".join(lines)

    def accept_reply(self, reply: str) -> None:
        """Keep a reply that was played in the chat (full style)."""
        if self.style == "full":
            self.chat.append({"role": "assistant", "content": reply})

    def retry_messages(
        self, sent: list[Message], reply: str, error: str, legal_labels: list[str]
    ) -> tuple[list[Message], int]:
        """Re-ask after an invalid reply: the reply and what was wrong with it are added."""
        echoed = reply if len(reply) <= ECHO_LIMIT_CHARS else "[...]" + reply[-ECHO_LIMIT_CHARS:]
        if self.numbered:
            listed, tag = numbered_list(legal_labels), "<answer>NUMBER</answer>"
        else:
            listed, tag = _join(legal_labels), "<answer>ACTION</answer>"
        notice = (
            f"That reply is not a valid move: {error}.\n"
            f"Legal actions: {listed}\n"
            f"Answer again and end with {tag}."
        )
        messages = [
            *sent,
            {"role": "assistant", "content": echoed},
            {"role": "user", "content": notice},
        ]
        if self.style == "full":
            self.chat = list(messages)
        return messages, len(sent)
