"""Reading a model's move out of its reply.

The reply must give its move as `<answer>ACTION</answer>`; the last such tag counts. ACTION is
compared with the legal action labels ignoring case, whitespace and one pair of outer angle
brackets, so `<answer> <x(1,1)> </answer>` and `<answer>X(1,1)</answer>` both choose `<X(1,1)>`.
Anything else (no tag, an empty tag, a label that is not legal now) is an invalid move. The scan
is linear in the reply's length, so a 100 KB reply costs microseconds, not a regex blow-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from games.actions import normalize_label

OPEN_TAG = "<answer>"
CLOSE_TAG = "</answer>"
MAX_ANSWER_CHARS = 200


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


def parse_move(reply: str, legal_labels: list[str]) -> ParsedMove:
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
