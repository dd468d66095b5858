"""Reading a model's move out of its reply, in one of two modes.

lenient (the default): the reply gives its move as `<answer>ACTION</answer>` anywhere; the last
such tag counts. ACTION is compared with the legal action labels ignoring case, whitespace and one
pair of outer angle brackets, so `<answer> <x(1,1)> </answer>` and `<answer>X(1,1)</answer>` both
choose `<X(1,1)>`. The scan is linear in the reply's length, so a 100 KB reply costs microseconds.

strict (the MARSHAL code's rule, docs/parity.md): the whole reply is an optional
`<think>...</think>` block, then `<answer>ACTION</answer>`, with only whitespace around them (a
reasoning parser leaves a blank line where it cut the think block out). ACTION, stripped of
surrounding whitespace and cut at the code's action separator `||`, must equal a legal label
exactly, case and brackets included. This reading is linear in the reply's length too.

Numbered prompts (`games.prompts`, style `numbered`) list the legal actions with numbers and
the answer is one: `parse_move(..., numbered=True)` reads ACTION, by the same mode's rule, as a
number from 1 to the list's length (`<answer>2</answer>` chooses the second legal label) and
never as a label, so one reply has one reading.

In both modes anything else (no tag, an empty tag, a label that is not legal now) is an invalid
move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.reasoning import THINK_CLOSE, THINK_OPEN
from games.actions import normalize_label
from games.rules import CHOICES, ParseMode

OPEN_TAG = "<answer>"
CLOSE_TAG = "</answer>"
MAX_ANSWER_CHARS = 200
PARSE_MODES: tuple[str, ...] = CHOICES["parse_mode"]
# The code keeps only the first of several actions joined by its `action_sep`.
STRICT_ACTION_SEPARATOR = "||"
_SPACES = re.compile(r"\s*")


@dataclass(frozen=True)
class ParsedMove:
    label: str | None  # the legal label chosen, None if the reply is invalid
    error: str | None = None  # why the reply is invalid (shown to the model in retry mode)

    @property
    def ok(self) -> bool:
        return self.label is not None


def extract_answer(reply: str) -> str | None:
    """The text inside the last complete <answer>...</answer> tag (case-insensitive)."""
    lowered = reply.lower()
    close = lowered.rfind(CLOSE_TAG)
    if close < 0:
        return None
    open_ = lowered.rfind(OPEN_TAG, 0, close)
    if open_ < 0:
        return None
    return reply[open_ + len(OPEN_TAG) : close]


def parse_move(
    reply: str, legal_labels: list[str], mode: ParseMode = "lenient", *, numbered: bool = False
) -> ParsedMove:
    if numbered:
        return _parse_number(reply, legal_labels, mode)
    if mode == "strict":
        return parse_move_strict(reply, legal_labels)
    answer = extract_answer(reply or "")
    if answer is None:
        return ParsedMove(None, "no <answer>ACTION</answer> tag found")
    if not answer.strip():
        return ParsedMove(None, "the answer tag is empty")
    if len(answer) > MAX_ANSWER_CHARS:
        return ParsedMove(None, "the answer is not one of the legal actions")
    wanted = normalize_label(answer)
    for label in legal_labels:
        if normalize_label(label) == wanted:
            return ParsedMove(label)
    shown = " ".join(answer.split())
    return ParsedMove(None, f"{shown!r} is not one of the legal actions")


def strict_answer(reply: str) -> str | None:
    r"""The ACTION of a reply that is, as a whole,
    `\s*(?:<think>.*?</think>\s*)?<answer>(.*?)</answer>\s*` (DOTALL), or None. Read in one pass:
    that pattern would try each `</think>` in turn and each time scan on to the reply's end,
    which is quadratic in the reply's length."""
    text = reply.rstrip()
    if not text.endswith(CLOSE_TAG):
        return None
    start, end = len(reply) - len(reply.lstrip()), len(text) - len(CLOSE_TAG)
    if reply.startswith(THINK_OPEN, start):
        close = reply.find(THINK_CLOSE, start + len(THINK_OPEN))
        while close >= 0:
            start = _SPACES.match(reply, close + len(THINK_CLOSE)).end()
            if reply.startswith(OPEN_TAG, start):
                break
            close = reply.find(THINK_CLOSE, close + 1)
    if not reply.startswith(OPEN_TAG, start) or start + len(OPEN_TAG) > end:
        return None
    return reply[start + len(OPEN_TAG) : end]


def parse_move_strict(reply: str, legal_labels: list[str]) -> ParsedMove:
    action = strict_answer(reply or "")
    if action is None:
        return ParsedMove(
            None, "the reply is not an optional <think> block then <answer>ACTION</answer>"
        )
    answer = action.split(STRICT_ACTION_SEPARATOR)[0].strip()
    if not answer:
        return ParsedMove(None, "the answer tag is empty")
    if answer in legal_labels:
        return ParsedMove(answer)
    shown = answer if len(answer) <= MAX_ANSWER_CHARS else answer[:MAX_ANSWER_CHARS] + "..."
    return ParsedMove(None, f"{shown!r} is not exactly one of the legal actions")


def _parse_number(reply: str, legal_labels: list[str], mode: ParseMode) -> ParsedMove:
    """A numbered prompt's answer: the legal label at that place of the list (counted from 1).
    The lenient reading drops the spaces inside a label; inside a number it must not (`1 2` is
    two numbers, not 12)."""
    numbers = [str(number) for number in range(1, len(legal_labels) + 1)]
    move = parse_move(reply, numbers, mode)
    if move.label is None:
        error = (move.error or "").replace("legal actions", "numbers of the legal actions")
        return ParsedMove(None, error.replace("ACTION", "NUMBER"))
    if mode == "lenient":
        answer = (extract_answer(reply) or "").strip()
        if len(answer) >= 2 and answer[0] == "<" and answer[-1] == ">":
            answer = answer[1:-1].strip()
        if answer != move.label:
            shown = " ".join(answer.split())
            return ParsedMove(None, f"{shown!r} is not one of the numbers of the legal actions")
    return ParsedMove(legal_labels[int(move.label) - 1])
