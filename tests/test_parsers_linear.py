"""Every parser of model replies stays linear on hostile input (issue 49).

A reply is untrusted: it is parsed inline in grading, in the workflows and in the training
rewards, and a parser that is quadratic on some text lets one reply stall them all (the move-list
parser once took 159 s on 64 KiB of lines that open a list and never close it). Each parser here
reads 256 KiB and 1 MiB of hostile text built for it (unclosed brackets, fences, `\\boxed{`,
`{`, tags and test headers; markers followed by long runs of blanks; nests; floods of lists that
almost parse); the 1 MiB read must take under a second, and at most GROWTH times the 256 KiB
read, so a quadratic parser (16 times) fails on a fast machine too. A parser that caps what it
reads (the training rewards, the failure judge's verdicts) passes by construction.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import pytest

from core.reasoning import split_reasoning
from games.parsing import parse_move
from harness.benchmarks import get_suite
from harness.benchmarks.code_suites import extract_program
from harness.benchmarks.extraction import (
    extract_choice_letter,
    extract_math_answer,
    strip_text_wrappers,
)
from harness.benchmarks.grading import SymbolicCheckNeeded, parse_number, rules_only
from harness.benchmarks.grading_worker import grade_inline
from harness.benchmarks.judge import parse_answer_verdict
from harness.failures.rules import message_answer
from harness.failures.taxonomy import normalize_mode_id
from harness.failures.verdict import parse_failure_verdict
from harness.puzzles import format_actions, make_level, new_state, parse_actions
from mas.answers import MAX_REPLY_CHARS, answer_key, extract_answer
from mas.base import Task, Transcript
from mas.code_tester import parse_tests
from mas.json_reply import parse_json_object
from mas.mad import parse_debate_verdict
from mas.reasoner_tool import code_of, printed_answer
from train_backend.local.tree_answers import last_answer_tag
from train_backend.mas.rewards import correct, puzzle_list_reward, single_rewards

SMALL, BIG = 256 * 1024, 1024 * 1024
LIMIT_S = 1.0  # for 1 MiB
GROWTH = 8.0  # 1 MiB against 256 KiB: linear is 4, quadratic 16
FLOOR_S = 0.01  # below this a read is too short to time


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda size: (unit * (size // len(unit) + 1))[:size]


def _padded(head: str, pad: str, tail: str = "") -> Callable[[int], str]:
    return lambda size: head + _repeat(pad)(size - len(head) - len(tail)) + tail


def _nest(opening: str, inside: str, closing: str) -> Callable[[int], str]:
    def build(size: int) -> str:
        depth = (size - len(inside)) // (len(opening) + len(closing))
        blanks = " " * (size - len(inside) - depth * (len(opening) + len(closing)))
        return opening * depth + inside + blanks + closing * depth

    return build


HOSTILE: dict[str, Callable[[int], str]] = {
    # move lists
    "unclosed brackets": _repeat("["),
    "lines opening a list": _repeat("[\n"),
    "nested lists": _nest("[", "U", "]"),
    "marked unclosed lists": _repeat("#### [U, D\n"),
    "markers on one line": _repeat("####"),
    "marker then blanks": _padded("**Actions List**", " ", "x"),
    "actions then blanks": _padded("actions", " \n", "[U]"),
    "empty lists": _repeat("[]\n"),
    "lists of no move": _repeat("[x]\n"),
    "lists of one short row": _repeat("[[1]]\n"),
    "lines of tuples": _repeat("[(1, 2, 3),\n"),
    "marked lists of no number": _repeat("#### [x] "),
    "distinct rows": lambda size: "".join(f"[[{i}]]\n" for i in range(size // 8))[:size],
    # code and tests
    "fences": _repeat("```python\n"),
    "fence then blanks": _padded("```", " "),
    "fence then blank lines": _padded("```json", "\n"),
    "tests without outputs": _repeat("**Test Input:**\n```\n1\n```\n"),
    "test headers on one line": _repeat("**Test Input:**```"),
    "outputs without inputs": _repeat("```**Test Output:**```"),
    # math and letters
    "unclosed boxes": _repeat("\\boxed{"),
    "boxes of no argument": _repeat("\\boxed\n"),
    "box of braces": _padded("\\boxed{", "{"),
    "hedged box then blanks": _padded("\\boxed{A or B", " ", "x}"),
    "nested text wrappers": _nest("\\text{", "C", "}"),
    "answer then blanks": _padded("The answer is", " ", "!"),
    "blank lines": _repeat("\n"),
    "either": _repeat("either "),
    "options or options": _repeat("(A) or "),
    "digits": _repeat("1"),
    "numbers and words": _repeat("1 a "),
    "blanks": _repeat(" "),
    # JSON and tags
    "unclosed objects": _repeat("{"),
    "nested objects": _repeat('{"a":'),
    "nested objects and lists": _repeat('{"a":['),
    "single-quoted strings": _repeat("{'a': '"),
    "objects of no JSON": _repeat("{x}"),
    "mode id then blanks": _padded("F", " ", "x"),
    "unclosed answer tags": _repeat("<answer>"),
    "think blocks then answers": _padded("<think>", "</think><answer>"),
    "unclosed think": _repeat("<think>"),
}
LISTS = [
    "unclosed brackets",
    "lines opening a list",
    "nested lists",
    "marked unclosed lists",
    "markers on one line",
    "marker then blanks",
    "actions then blanks",
    "empty lists",
    "lists of no move",
    "lists of one short row",
    "lines of tuples",
    "marked lists of no number",
    "distinct rows",
    "digits",
    "blanks",
]
MATH = [
    "unclosed boxes",
    "boxes of no argument",
    "box of braces",
    "hedged box then blanks",
    "nested text wrappers",
    "answer then blanks",
    "blank lines",
    "either",
    "options or options",
    "digits",
    "numbers and words",
    "blanks",
    "markers on one line",
    "unclosed brackets",
]
GRADED = ["unclosed boxes", "hedged box then blanks", "answer then blanks"]
CODE = [
    "fences",
    "fence then blanks",
    "fence then blank lines",
    "tests without outputs",
    "test headers on one line",
    "outputs without inputs",
    "blank lines",
    "unclosed boxes",
]
JSON = [
    "unclosed objects",
    "nested objects",
    "nested objects and lists",
    "single-quoted strings",
    "objects of no JSON",
    "fence then blanks",
    "fence then blank lines",
    "unclosed boxes",
    "blanks",
    "mode id then blanks",
]
TAGS = [
    "unclosed answer tags",
    "think blocks then answers",
    "unclosed think",
    "blanks",
    "blank lines",
]

SUDOKU = make_level("sudoku", "eval", 0, size=9)
PLAN_PATH = make_level("plan_path", "eval", 0, size=10)
PUZZLE_TASK = Task(prompt="", kind="puzzle", metadata={"environment": PLAN_PATH.ref})
MATH_TASK = Task(prompt="", kind="math", suite="math500")
CHOICE_TASK = Task(prompt="", kind="choice", suite="gpqa_diamond")
CHOICES = ["one", "two", "three", "four"]
LABELS = ["<X(1,1)>", "<O(2,2)>"]


def _graded(suite: str, gold: str) -> Callable[[str], Any]:
    def grade(text: str) -> Any:
        with rules_only():  # what grading does inline; math-verify is a worker's job
            try:
                return get_suite(suite).grade(
                    text, gold, CHOICES if suite == "gpqa_diamond" else None
                )
            except SymbolicCheckNeeded:
                return None

    return grade


PARSERS: dict[str, tuple[Callable[[str], Any], list[str]]] = {
    "parse_actions plan_path": (lambda text: parse_actions("plan_path", text), LISTS),
    "parse_actions sudoku": (lambda text: parse_actions("sudoku", text), LISTS),
    "sudoku_9x9 grade": (_graded("sudoku_9x9", SUDOKU.ref), LISTS[:4]),
    "parse_move lenient": (lambda text: parse_move(text, LABELS), TAGS),
    "parse_move strict": (lambda text: parse_move(text, LABELS, "strict"), TAGS),
    "parse_move numbered": (lambda text: parse_move(text, LABELS, numbered=True), TAGS),
    "extract_math_answer": (extract_math_answer, MATH),
    "extract_choice_letter": (lambda text: extract_choice_letter(text, "ABCD", CHOICES), MATH),
    "strip_text_wrappers": (strip_text_wrappers, MATH[:6]),
    "parse_number": (parse_number, MATH[:6]),
    "answer_key math": (answer_key, MATH),
    "answer_key choice": (lambda text: answer_key(text, "choice"), MATH[:6]),
    # the suites' grading and the workflows' votes go through the readings above
    "gsm8k grade": (_graded("gsm8k", "18"), GRADED),
    "math500 grade": (_graded("math500", "\\frac{1}{2}"), GRADED),
    "gpqa_diamond grade": (_graded("gpqa_diamond", "B"), GRADED),
    "grade_inline": (lambda text: grade_inline("gsm8k", text, "18"), GRADED),
    "extract_answer (the workflows' votes)": (
        lambda text: extract_answer(MATH_TASK, text),
        GRADED,
    ),
    "extract_program": (extract_program, CODE),
    "code_of": (code_of, CODE),
    "printed_answer": (printed_answer, ["blank lines", "blanks", "digits"]),
    "parse_tests": (parse_tests, CODE),
    "parse_json_object": (parse_json_object, JSON),
    "parse_debate_verdict": (parse_debate_verdict, JSON[:3]),
    "parse_answer_verdict": (parse_answer_verdict, ["blanks", "blank lines", *JSON[:2]]),
    "parse_failure_verdict": (parse_failure_verdict, JSON),
    "message_answer": (message_answer, ["unclosed boxes", "boxes of no argument", "blanks"]),
    "normalize_mode_id": (normalize_mode_id, ["mode id then blanks", "blanks", "blank lines"]),
    "split_reasoning": (split_reasoning, TAGS),
    "tree rollout's answer tag": (last_answer_tag, TAGS),
    "puzzle_list_reward": (lambda text: puzzle_list_reward(text, PUZZLE_TASK), LISTS[:4]),
    "single_rewards math": (
        lambda text: single_rewards(Transcript(final_answer=text), "18", MATH_TASK),
        MATH[:6],
    ),
    "single_rewards choice": (
        lambda text: single_rewards(Transcript(final_answer=text), "B", CHOICE_TASK),
        MATH[:6],
    ),
}
CASES = [(parser, hostile) for parser, (_, inputs) in PARSERS.items() for hostile in inputs]


@functools.cache
def _text(hostile: str, size: int) -> str:
    return HOSTILE[hostile](size)


def _seconds(parse: Callable[[str], Any], text: str) -> float:
    start = time.perf_counter()
    parse(text)
    return time.perf_counter() - start


@pytest.mark.parametrize(("parser", "hostile"), CASES, ids=[f"{p}: {h}" for p, h in CASES])
def test_a_parser_reads_a_mebibyte_of_hostile_text_in_linear_time(
    parser: str, hostile: str
) -> None:
    parse = PARSERS[parser][0]
    small, big = _text(hostile, SMALL), _text(hostile, BIG)
    assert len(small) == SMALL and len(big) == BIG
    parse(small[:1024])  # imports and caches out of the way
    best_small = best_big = float("inf")
    for _ in range(3):  # a busy machine may stall one read: the best of a few counts
        best_small = min(best_small, _seconds(parse, small))
        best_big = min(best_big, _seconds(parse, big))
        if best_big < LIMIT_S and best_big <= GROWTH * max(best_small, FLOOR_S):
            return
    pytest.fail(
        f"{parser} on {hostile!r}: {best_small:.3f} s for 256 KiB, {best_big:.3f} s for 1 MiB "
        f"(at most {LIMIT_S} s, and {GROWTH:g} times the 256 KiB read)"
    )


def test_the_hostile_texts_are_what_they_say() -> None:
    assert set(HOSTILE) == {hostile for _, hostile in CASES}  # each one is read by some parser
    assert parse_actions("plan_path", "#### [U, D\n" * 3 + "#### [R]") == ["R"]
    assert _text("nested text wrappers", 100).startswith("\\text{\\text{")
    assert _text("nested lists", 10) == "[[[[U ]]]]"
    # the lists that almost parse do not, and the real one after a flood of them still does
    flood = _text("lists of one short row", SMALL)
    grid = format_actions("sudoku", [list(row) for row in SUDOKU.solution])
    assert parse_actions("sudoku", flood) is None
    assert parse_actions("sudoku", f"{flood}\n#### {grid}") == [
        list(row) for row in SUDOKU.solution
    ]


def test_the_rewards_read_a_reply_from_its_end() -> None:
    # Their time is bounded by construction: a reply is read from its last MAX_REPLY_CHARS.
    moves = list(PLAN_PATH.solution)
    solution, reward = format_actions("plan_path", moves), new_state(PLAN_PATH).apply(moves).reward
    prose = "I think. " * (MAX_REPLY_CHARS // 4)
    assert puzzle_list_reward(f"{prose}\n#### {solution}", PUZZLE_TASK) == pytest.approx(reward)
    assert puzzle_list_reward(f"#### {solution}\n{prose}", PUZZLE_TASK) == -2.0  # out of reach
    right = Transcript(final_answer=f"{prose}\\boxed{{18}}")
    assert single_rewards(right, "18", MATH_TASK) == {("solver", 0): 2.0}
    assert correct("18", "18", MATH_TASK) and not correct(
        "1" * (MAX_REPLY_CHARS + 1), "1", MATH_TASK
    )
