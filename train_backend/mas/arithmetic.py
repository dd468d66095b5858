"""The arithmetic set of the CPU miniature: seeded integer expressions such as "What is 7 + 3 * 2?".

A canonical expression's hash decides its split (`train` or `heldout`), so the two never share a
problem whatever seeds each side draws with, and the same arguments give the same problems in
any process.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Literal

from core.errors import MarsError
from train_backend.mas.data import Problem

ArithmeticSplit = Literal["train", "heldout"]

# One canonical expression in HELD_OUT_BUCKETS (by hash) belongs to the held-out split.
HELD_OUT_BUCKETS = 5
_ARITHMETIC_OPERATORS = ("+", "-", "*")


def arithmetic_problems(
    count: int,
    seed: int,
    split: ArithmeticSplit = "train",
    *,
    max_operand: int = 9,
    operand_counts: Sequence[int] = (2, 3),
) -> list[Problem]:
    """`count` distinct expressions such as "What is 7 + 3 * 2?" over integers 0..max_operand,
    non-negative results only, the same for the same arguments in any process. A canonical
    expression's hash decides its split, so train and held-out problems never coincide,
    whatever seeds each side uses."""
    _check_arithmetic_arguments(count, split, max_operand, operand_counts)
    rng = random.Random(f"mars-arithmetic:{split}:{seed}")
    source = f"arithmetic:{split}:seed={seed}"
    problems: list[Problem] = []
    seen: set[str] = set()
    for _ in range(100 * count + 1000):  # bounded: a small space may hold fewer than `count`
        if len(problems) == count:
            return problems
        expression, value = _random_expression(rng, max_operand, operand_counts)
        if value < 0 or expression in seen or arithmetic_split_of(expression) != split:
            continue
        seen.add(expression)
        problems.append(
            Problem(
                id=f"arith-{split}-s{seed}/{len(problems)}",
                question=f"What is {expression}?",
                answer=str(value),
                source=source,
                answers_are="integer",
            )
        )
    if len(problems) == count:
        return problems
    raise MarsError(
        f"only {len(problems)} distinct {split} arithmetic problems found with operands up to "
        f"{max_operand}; ask for fewer than {count} or raise max_operand"
    )


def arithmetic_split_of(expression: str) -> ArithmeticSplit:
    """Which split a canonical expression ("7 + 3 * 2") belongs to."""
    digest = hashlib.sha256(f"mars-arithmetic-split:{expression}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % HELD_OUT_BUCKETS == 0 else "train"


def evaluate_expression(numbers: Sequence[int], operators: Sequence[str]) -> int:
    """Value of numbers[0] op[0] numbers[1] ... with `*` before `+` and `-`, left to right."""
    if len(numbers) != len(operators) + 1:
        raise ValueError("an expression needs one operator fewer than numbers")
    terms, signs = [numbers[0]], [1]
    for operator, number in zip(operators, numbers[1:], strict=True):
        if operator == "*":
            terms[-1] *= number
        elif operator in ("+", "-"):
            terms.append(number)
            signs.append(1 if operator == "+" else -1)
        else:
            raise ValueError(f"unknown operator {operator!r}")
    return sum(sign * term for sign, term in zip(signs, terms, strict=True))


def _random_expression(
    rng: random.Random, max_operand: int, operand_counts: Sequence[int]
) -> tuple[str, int]:
    size = rng.choice(list(operand_counts))
    numbers = [rng.randint(0, max_operand) for _ in range(size)]
    operators = [rng.choice(_ARITHMETIC_OPERATORS) for _ in range(size - 1)]
    parts = [str(numbers[0])]
    for operator, number in zip(operators, numbers[1:], strict=True):
        parts += [operator, str(number)]
    return " ".join(parts), evaluate_expression(numbers, operators)


def _check_arithmetic_arguments(
    count: int, split: str, max_operand: int, operand_counts: Sequence[int]
) -> None:
    if count < 1:
        raise MarsError(f"the number of arithmetic problems must be positive, got {count}")
    if split not in ("train", "heldout"):
        raise MarsError(f"the arithmetic split is 'train' or 'heldout', got {split!r}")
    if max_operand < 1:
        raise MarsError(f"max_operand must be at least 1, got {max_operand}")
    if not operand_counts or any(size not in (2, 3, 4) for size in operand_counts):
        raise MarsError(f"operand counts must be 2, 3 or 4, got {list(operand_counts)}")
