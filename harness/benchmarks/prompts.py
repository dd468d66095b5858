"""User-prompt text for a sample. The multi-agent layer wraps it in chat messages."""

from __future__ import annotations

LETTERS = "ABCDEFGHIJ"

MATH_INSTRUCTION = (
    "Reason through the problem step by step. When you are done, write only the final answer "
    "(no units, no explanation) inside \\boxed{}."
)

CHOICE_INSTRUCTION = (
    "Reason through the question step by step. When you are done, write the letter of the "
    "correct option, and nothing else, inside \\boxed{{}} (one of {letters})."
)


def math_prompt(question: str) -> str:
    return f"{question.strip()}\n\n{MATH_INSTRUCTION}"


def format_options(choices: list[str]) -> str:
    return "\n".join(f"{LETTERS[index]}) {text}" for index, text in enumerate(choices))


def choice_prompt(question: str, choices: list[str]) -> str:
    letters = ", ".join(LETTERS[: len(choices)])
    instruction = CHOICE_INSTRUCTION.format(letters=letters)
    return f"{question.strip()}\n\n{format_options(choices)}\n\n{instruction}"
