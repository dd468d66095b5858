"""Reading answers out of agent replies, for protocols that compare or vote on them.

`extract_answer` uses the task's own suite (so a vote counts exactly what the grader will read);
a task without a suite falls back to the last `\\boxed{...}`. `answer_key` makes equal answers
compare equal ("18", "18.0", "$18" are one number; option letters ignore case and brackets).
"""

from __future__ import annotations

import functools
import re

from core.errors import MarsError
from harness.benchmarks import Suite, get_suite
from harness.benchmarks.extraction import last_boxed, strip_text_wrappers
from harness.benchmarks.grading import parse_number
from mas.base import Task, Transcript

# Where a reply is parsed inline and its result pays a reward (the training rewards, plan_tool's
# lists), only its last MAX_REPLY_CHARS characters are read: every parser of replies is linear,
# and the cap bounds its time by construction. An answer stands at its reply's end, and this
# holds any real one many times over (a 9 x 9 Sudoku's fills as Python prints them are about
# 1,000 characters, a move list of 900 moves about 4,500); the sandbox keeps at most 64 KiB of a
# program's output.
MAX_REPLY_CHARS = 65_536
_SPACES = re.compile(r"\s+")
_LEADING_LETTER = re.compile(r"\s*[(\[]?([A-Za-z])(?:[)\].:]|\s|$)")


@functools.lru_cache(maxsize=64)
def _suite(name: str) -> Suite | None:
    try:
        return get_suite(name)
    except MarsError:
        return None


def extract_answer(task: Task, text: str) -> str | None:
    """The answer the grader would read in `text`, or None when it holds none."""
    suite = _suite(task.suite) if task.suite else None
    if suite is not None:
        return suite.extract(text, choices=None)
    return last_boxed(text) or None


def reply_tail(text: str) -> str:
    """The part of a reply that is parsed inline: its last MAX_REPLY_CHARS characters."""
    return text[-MAX_REPLY_CHARS:]


def answer_key(answer: str, kind: str = "math") -> str:
    """A canonical form of an extracted answer: equal keys mean the same answer."""
    if kind == "choice":
        letter = _LEADING_LETTER.match(answer)
        return letter.group(1).upper() if letter else answer.strip().upper()
    number = parse_number(answer, allow_words=False)
    if number is not None:
        return f"number:{number}"
    text = strip_text_wrappers(answer).replace("$", "").rstrip(".")
    return "text:" + _SPACES.sub("", text)


def end_critic_chat(
    transcript: Transcript, task: Task, solver_texts: list[str], approved: bool, cap: str
) -> None:
    """The end of a solver-critic chat (`autogen`, `agent_framework`): the graded answer is the
    solver's last text with a readable answer (else its last text), a round per solver text,
    stopped early when the critic approved, else by the cap (`cap`: the stop reason)."""
    readable = [text for text in solver_texts if extract_answer(task, text) is not None]
    transcript.final_answer = (readable or solver_texts or [""])[-1]
    transcript.rounds = len(solver_texts)
    transcript.ended_early = approved
    transcript.stop_reason = "critic_approved" if approved else cap
