"""Procedural stdin/stdout problems for the code workflow's CPU miniature (`train_set: code_mini`).

Each problem is a small task family with a constant of its own ("print a + b + 7"), a reference
solution (written here, trusted: it only runs in the sandbox like any program) and ground-truth
tests whose expected outputs are computed in-process by the family's own function. A problem's
statement decides its split by hash, so train and held-out problems never share a statement.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from core.errors import MarsError
from train_backend.mas.data import Problem

CodeSplit = Literal["train", "heldout"]
HELD_OUT_BUCKETS = 5
TESTS_PER_PROBLEM = 6


@dataclass(frozen=True)
class Family:
    name: str
    statement: str  # with {c}
    solution: str  # Python source with {c}
    make_input: Callable[[random.Random], str]
    answer: Callable[[str, int], str]  # (stdin, c) -> expected stdout


def _two_ints(rng: random.Random) -> str:
    return f"{rng.randint(-50, 50)} {rng.randint(-50, 50)}\n"


def _int_list(rng: random.Random) -> str:
    values = [rng.randint(-99, 99) for _ in range(rng.randint(1, 6))]
    return f"{len(values)}\n{' '.join(map(str, values))}\n"


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeiou") for _ in range(rng.randint(1, 8))) + "\n"


def _ints_of(text: str) -> list[int]:
    return [int(token) for token in text.split()]


FAMILIES: tuple[Family, ...] = (
    Family(
        "sum_plus",
        "Read two integers a and b from one line of input and print a + b + {c}.",
        "a, b = map(int, input().split())\nprint(a + b + {c})\n",
        _two_ints,
        lambda given, c: f"{sum(_ints_of(given)) + c}\n",
    ),
    Family(
        "product_minus",
        "Read two integers a and b from one line of input and print a * b - {c}.",
        "a, b = map(int, input().split())\nprint(a * b - {c})\n",
        _two_ints,
        lambda given, c: f"{_ints_of(given)[0] * _ints_of(given)[1] - c}\n",
    ),
    Family(
        "max_plus",
        "The first line holds n, the second n integers. Print their maximum plus {c}.",
        "input()\nprint(max(map(int, input().split())) + {c})\n",
        _int_list,
        lambda given, c: f"{max(_ints_of(given)[1:]) + c}\n",
    ),
    Family(
        "sum_times",
        "The first line holds n, the second n integers. Print their sum times {c}.",
        "input()\nprint(sum(map(int, input().split())) * {c})\n",
        _int_list,
        lambda given, c: f"{sum(_ints_of(given)[1:]) * c}\n",
    ),
    Family(
        "repeat_word",
        "Read one word and print it {c} times, with no spaces between the copies.",
        "print(input().strip() * {c})\n",
        _word,
        lambda given, c: f"{given.strip() * c}\n",
    ),
)


def code_problem_split(statement: str) -> CodeSplit:
    digest = hashlib.sha256(f"mars-code-split:{statement}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % HELD_OUT_BUCKETS == 0 else "train"


def code_problems(count: int, seed: int, split: CodeSplit = "train") -> list[Problem]:
    """`count` distinct problems of `split` (a family and a constant 1..40 each), with
    TESTS_PER_PROBLEM ground-truth tests; the same for the same arguments in any process."""
    if count < 1:
        raise MarsError(f"the number of code problems must be positive, got {count}")
    candidates = [
        (family, constant)
        for family in FAMILIES
        for constant in range(1, 41)
        if code_problem_split(family.statement.format(c=constant)) == split
    ]
    if count > len(candidates):
        raise MarsError(f"only {len(candidates)} {split} code problems exist; ask for fewer")
    rng = random.Random(f"mars-code:{split}:{seed}")
    chosen = rng.sample(candidates, count)
    problems: list[Problem] = []
    for family, constant in chosen:
        inputs = [family.make_input(rng) for _ in range(TESTS_PER_PROBLEM)]
        tests = [{"stdin": given, "expected": family.answer(given, constant)} for given in inputs]
        problems.append(
            Problem(
                id=f"code-{split}/{family.name}-{constant}",
                question=family.statement.format(c=constant),
                answer="",
                source=f"code_mini:{split}:seed={seed}",
                kind="code",
                metadata={"tests": tests, "solution": family.solution.format(c=constant)},
            )
        )
    return problems
