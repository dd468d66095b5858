r"""Deciding whether an extracted answer matches the gold answer.

Three rules, chosen per suite:
- `numbers_equal`: GSM8K-style numbers (thousands commas, `$`, units, `%`, trailing `.0`) compared
  exactly as rationals; with `integer=True` (AIME, AMC) both must be whole numbers.
- `math_equal`: symbolic equivalence with math-verify, after a cheap exact-text check.
- choice letters are compared directly by the suite.

math-verify bounds its own run time with SIGALRM, which Python allows only in the main thread. In
any other thread (an asyncio.to_thread worker, a thread pool) the timeout is switched off and the
answer length is capped instead, so a pathological answer cannot stall a worker.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import re
import threading
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from harness.benchmarks.extraction import strip_text_wrappers

MATH_VERIFY_TIMEOUT_S = 5
MAX_SYMBOLIC_CHARS = 400  # longer answers are compared as text only

_rules_only = contextvars.ContextVar("mars_rules_only", default=False)


class SymbolicCheckNeeded(Exception):
    """Raised under `rules_only()` where a grade would call math-verify."""


@contextlib.contextmanager
def rules_only() -> Iterator[None]:
    """Grade with the plain rules alone: where math-verify would be called, raise
    `SymbolicCheckNeeded` instead (the caller hands the answer to a grading worker)."""
    token = _rules_only.set(True)
    try:
        yield
    finally:
        _rules_only.reset(token)


_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER_WITH_WORDS = re.compile(
    r"(?:[A-Za-z]+\.?\s+)*?(?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+))(?:\s*[A-Za-z][A-Za-z\s.]*)?"
)
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_LATEX_NOISE = (
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", " "),
    ("\\ ", " "),
    ("{,}", ""),
    ("\\$", ""),
    ("$", ""),
    ("\\%", ""),
    ("%", ""),
    ("^\\circ", ""),
    ("^{\\circ}", ""),
    ("°", ""),
    ("−", "-"),
    ("\\left", ""),
    ("\\right", ""),
)


def _without_latex_noise(text: str) -> str:
    text = strip_text_wrappers(text)
    for old, new in _LATEX_NOISE:
        text = text.replace(old, new)
    return text.strip()


def parse_number(text: str, *, allow_words: bool = True) -> Fraction | None:
    """The one number in `text`, or None when it is not a single plain number.

    `allow_words` accepts unit words around it ("18 dollars", "x = 5" is handled by taking the
    right-hand side); without it only a bare number (after markup removal) counts.
    """
    value = _without_latex_noise(text)
    if "=" in value:
        value = value.rsplit("=", 1)[1].strip()
    value = _THOUSANDS_COMMA.sub("", value).rstrip(".").strip()
    pattern = _NUMBER_WITH_WORDS if allow_words else _PLAIN_NUMBER
    match = pattern.fullmatch(value)
    if not match:
        return None
    number = match.group("number") if allow_words else match.group(0)
    try:
        return Fraction(number)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_equal(gold: str, extracted: str, *, integer: bool = False) -> bool:
    """Exact rational comparison of two GSM8K-style numbers; falls back to math-verify when the
    extracted answer is not a plain number (e.g. `\\frac{36}{2}`)."""
    gold_number = parse_number(gold)
    if gold_number is None:
        return math_equal(gold, extracted)
    if integer and gold_number.denominator != 1:
        return False
    answer = parse_number(extracted)
    if answer is None:
        return math_verify_equal(str(gold_number), extracted)
    return answer == gold_number


def _canonical_text(text: str) -> str:
    return re.sub(r"\s+", "", _without_latex_noise(text)).removeprefix("\\displaystyle")


def math_equal(gold: str, extracted: str) -> bool:
    """Equivalent as mathematics: identical text, equal plain numbers, or math-verify agrees."""
    if _canonical_text(gold) == _canonical_text(extracted):
        return True
    gold_number = parse_number(gold, allow_words=False)
    answer_number = parse_number(extracted, allow_words=False)
    if gold_number is not None and answer_number is not None:
        return gold_number == answer_number
    return math_verify_equal(gold, extracted)


def _math_verify_timeout() -> int | None:
    on_main_thread = threading.current_thread() is threading.main_thread()
    return MATH_VERIFY_TIMEOUT_S if on_main_thread else None


@functools.lru_cache(maxsize=1)
def _math_verify() -> Any:
    import math_verify

    # It warns once when timeouts are off (they are, off the main thread) and on each timeout.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return math_verify


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, timeout: int | None) -> tuple[Any, ...]:
    # Gold strings repeat across epochs and agents, so their parses are kept.
    return tuple(_math_verify().parse(f"${gold}$", parsing_timeout=timeout))


def math_verify_equal(gold: str, extracted: str) -> bool:
    """math-verify's verdict on `extracted` against `gold` (both bare LaTeX, no delimiters)."""
    if len(extracted) > MAX_SYMBOLIC_CHARS or len(gold) > MAX_SYMBOLIC_CHARS:
        return False
    if _rules_only.get():
        raise SymbolicCheckNeeded
    math_verify = _math_verify()
    timeout = _math_verify_timeout()
    gold_parsed = list(_parse_gold(gold, timeout))
    answer_parsed = math_verify.parse(f"\\boxed{{{extracted}}}", parsing_timeout=timeout)
    if not gold_parsed or not answer_parsed:
        return False
    return bool(math_verify.verify(gold_parsed, answer_parsed, timeout_seconds=timeout))
