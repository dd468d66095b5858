"""Hand-checked grading cases per suite, extraction details, prompts."""

from __future__ import annotations

import threading

import pytest

from core.errors import MarsError
from harness.benchmarks import Sample, Verdict, get_suite
from harness.benchmarks.extraction import extract_choice_letter, last_answer_statement, last_boxed
from harness.benchmarks.grading import parse_number

AQUA_CHOICES = ["5(√3 + 1)", "6(√3 + √2)", "7(√3 – 1)", "8(√3 – 2)", "None of these"]

# (suite, gold, response, expected extracted, expected correct); extraction_failed is
# expected exactly when `extracted` is None.
CASES: list[tuple[str, str, str, str | None, bool]] = [
    # GSM8K: number formatting
    ("gsm8k", "1000", r"Adding up, \boxed{1,000}", "1,000", True),
    ("gsm8k", "1000", r"\boxed{\$1,000.00}", r"\$1,000.00", True),
    ("gsm8k", "18", r"\boxed{18 \text{ dollars}}", r"18 \text{ dollars}", True),
    ("gsm8k", "18", r"\boxed{\frac{36}{2}}", r"\frac{36}{2}", True),
    ("gsm8k", "18", "The answer is 18.", "18", True),
    ("gsm8k", "18", "#### 18", "18", True),
    ("gsm8k", "50", r"\boxed{50\%}", r"50\%", True),
    ("gsm8k", "-3", r"\boxed{-3}", "-3", True),
    ("gsm8k", "18", r"\boxed{17}", "17", False),
    ("gsm8k", "18", r"\boxed{180}", "180", False),
    ("gsm8k", "18", "She makes 18 dollars every day.", None, False),
    # MATH500: symbolic equivalence
    ("math500", r"\frac{1}{2}", r"so \boxed{0.5}", "0.5", True),
    ("math500", "0.5", r"\boxed{\dfrac{1}{2}}", r"\dfrac{1}{2}", True),
    ("math500", r"\frac{1}{2}", r"\boxed{1/2}", "1/2", True),
    ("math500", r"3\sqrt{13}", r"\boxed{\sqrt{117}}", r"\sqrt{117}", True),
    ("math500", r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3, \pi/2)}", r"(3, \pi/2)", True),
    ("math500", r"\text{Evelyn}", r"\boxed{\text{Evelyn}}", r"\text{Evelyn}", True),
    ("math500", "90^\\circ", r"\boxed{90}", "90", True),
    ("math500", "1,-2", r"\boxed{-2, 1}", "-2, 1", True),
    ("math500", "1000", "The final answer is $1,000$.", "1,000", True),
    ("math500", r"\frac{1}{2}", r"\boxed{\frac{1}{3}}", r"\frac{1}{3}", False),
    ("math500", "[2,5)", r"\boxed{(2, 5)}", "(2, 5)", False),
    ("math500", r"\text{Evelyn}", r"\boxed{\text{Bob}}", r"\text{Bob}", False),
    ("math500", "10", "I could not finish the computation.", None, False),
    # AIME / AMC: integers
    ("aime24", "025", r"\boxed{25}", "25", True),
    ("aime24", "25", r"\boxed{025}", "025", True),
    ("aime24", "25", r"\boxed{25.5}", "25.5", False),
    ("aime24", "204", "", None, False),
    ("amc23", "27.0", r"\boxed{27}", "27", True),
    ("amc23", "27.0", "**Final Answer:** 27", "27", True),
    ("amc23", "27.0", "**Final Answer**: $27$", "27", True),
    ("amc23", "-1.0", r"\boxed{-1}", "-1", True),
    ("amc23", "27.0", r"\boxed{28}", "28", False),
    ("amc23", "27.0", r"\boxed{", None, False),
    # Choice letters
    ("aqua", "C", r"\boxed{C}", "C", True),
    ("aqua", "C", r"\boxed{(C)}", "C", True),
    ("aqua", "C", r"\boxed{\text{C}}", "C", True),
    ("aqua", "C", "The answer is (C).", "C", True),
    ("aqua", "C", "(C)", "C", True),
    ("aqua", "C", r"\boxed{C) 7(√3 – 1)}", "C", True),
    ("aqua", "E", r"\boxed{E}", "E", True),
    ("aqua", "C", "The answer is (D)", "D", False),
    ("aqua", "C", "A looks wrong, and so does B.", None, False),
    ("gpqa_diamond", "B", "Answer: B", "B", True),
    ("gpqa_diamond", "B", "**Final answer:** (b)", None, False),
    ("gpqa_diamond", "B", r"\boxed{E}", None, False),  # only A-D exist
    ("gpqa_diamond", "b", r"The answer is \boxed{B}", "B", True),
    ("gpqa_diamond", "B", r"\boxed{D}", "D", False),
    ("mmlu_stem", "A", "The correct option is A", "A", True),
    ("mmlu_stem", "A", r"First \boxed{B}, on reflection \boxed{A}", "A", True),
    ("mmlu_stem", "A", r"\boxed{B}", "B", False),
    ("mmlu_stem", "A", "I am not sure.", None, False),
    # A hedge between two options is no answer, not the first option named
    ("aqua", "C", "The answer is C or D.", None, False),
    ("aqua", "C", "The answer is (C) or (D)", None, False),
    ("aqua", "C", "Answer: C/D", None, False),
    ("aqua", "B", "The answer is either B or C.", None, False),
    ("aqua", "C", r"\boxed{C or D}", None, False),
    ("aqua", "C", r"\boxed{C \text{ or } D}", None, False),
    ("aqua", "C", r"\boxed{C, D}", None, False),
    ("aqua", "D", r"\boxed{C} or \boxed{D}", None, False),
    ("aqua", "C", r"So the answer is C. \boxed{either C or D}", None, False),
    ("gpqa_diamond", "C", "The answer is C, not D.", "C", True),
    ("gpqa_diamond", "C", "The answer is C. D is wrong because it ignores friction.", "C", True),
    ("gpqa_diamond", "C", r"Not \boxed{D}: the answer is \boxed{C}", "C", True),
]


@pytest.mark.parametrize(("suite", "gold", "response", "extracted", "correct"), CASES)
def test_hand_checked_case(
    suite: str, gold: str, response: str, extracted: str | None, correct: bool
) -> None:
    verdict = get_suite(suite).grade(response, gold)
    assert verdict.extracted == extracted
    assert verdict.correct is correct
    assert verdict.extraction_failed is (extracted is None)


def test_every_suite_has_a_case_of_each_kind() -> None:
    kinds: dict[str, set[str]] = {}
    for suite, _, _, extracted, correct in CASES:
        kind = "failed" if extracted is None else ("right" if correct else "wrong")
        kinds.setdefault(suite, set()).add(kind)
    assert len(kinds) == 7
    assert all(found == {"failed", "right", "wrong"} for found in kinds.values()), kinds


def test_boxed_option_text_maps_to_its_letter_when_choices_are_given() -> None:
    aqua = get_suite("aqua")
    verdict = aqua.grade(r"\boxed{7(√3 – 1)}", "C", AQUA_CHOICES)
    assert (verdict.extracted, verdict.correct) == ("C", True)
    assert aqua.grade(r"\boxed{7(√3 – 1)}", "C").extraction_failed  # no choices to match


def test_choice_range_follows_the_number_of_choices() -> None:
    mmlu = get_suite("mmlu_stem")
    assert mmlu.grade(r"\boxed{E}", "A").extraction_failed
    six = ["1", "2", "3", "4", "5", "6"]
    assert mmlu.grade(r"\boxed{F}", "F", six).correct


def test_gold_letter_outside_the_options_is_a_user_error() -> None:
    with pytest.raises(MarsError, match="letters A, B, C, D"):
        get_suite("gpqa_diamond").grade(r"\boxed{A}", "E")
    with pytest.raises(MarsError, match="empty"):
        get_suite("gsm8k").grade(r"\boxed{1}", "  ")


def test_verdict_fields_are_the_documented_ones() -> None:
    verdict = get_suite("gsm8k").grade(r"\boxed{2}", "2")
    assert verdict.model_dump() == {
        "extracted": "2",
        "gold": "2",
        "correct": True,
        "extraction_failed": False,
    }
    assert isinstance(verdict, Verdict)


def test_grading_works_off_the_main_thread() -> None:
    # math-verify's own timeout relies on SIGALRM, which only the main thread may use.
    results: list[bool] = []
    errors: list[BaseException] = []

    def grade() -> None:
        try:
            math500 = get_suite("math500")
            results.append(math500.grade(r"\boxed{\sqrt{2}/2}", r"\frac{1}{\sqrt{2}}").correct)
            results.append(math500.grade(r"\boxed{\sqrt{3}/2}", r"\frac{1}{\sqrt{2}}").correct)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=grade)
    worker.start()
    worker.join(60)
    assert errors == []
    assert results == [True, False]


def test_last_boxed_handles_nesting_and_truncation() -> None:
    assert last_boxed(r"\boxed{\frac{1}{\sqrt{2}}} and more") == r"\frac{1}{\sqrt{2}}"
    assert last_boxed(r"\boxed{1} then \boxed{2}") == "2"
    assert last_boxed(r"\boxed{1} then cut off \boxed{\frac{2}{") == "1"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed(r"so $\boxed 5$") == "5"
    assert last_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert last_boxed("no box here") is None


def test_answer_statement_takes_the_last_one() -> None:
    text = "The answer is 3? No.\nRechecking, the final answer is $\\frac{7}{2}$."
    assert last_answer_statement(text) == r"\frac{7}{2}"


def test_choice_extraction_ignores_loose_letter_mentions() -> None:
    assert extract_choice_letter("Option A fails because B is larger.", "ABCD") is None
    assert extract_choice_letter("Answer: option C", "ABCD") == "C"
    assert extract_choice_letter("the answer is [D]", "ABCD") == "D"


@pytest.mark.parametrize(
    ("text", "value"),
    [("1,000", 1000), ("$1,234.50", 1234.5), ("18 dollars", 18), ("x = -4", -4), ("7.0", 7)],
)
def test_parse_number_accepts_gsm8k_styles(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["1/2", "3x-1", "1, 2", r"\sqrt{2}", "two"])
def test_parse_number_refuses_non_numbers(text: str) -> None:
    assert parse_number(text) is None


def test_math_prompt_asks_for_reasoning_then_a_box() -> None:
    sample = Sample(id="0", question="What is 2 + 3?", gold="5")
    prompt = get_suite("gsm8k").prompt(sample)
    assert prompt.startswith("What is 2 + 3?")
    assert "step by step" in prompt and r"\boxed{}" in prompt
    assert prompt.index("step by step") < prompt.index(r"\boxed{}")


def test_choice_prompt_lists_lettered_options_in_order() -> None:
    sample = Sample(id="0", question="Pick one.", choices=AQUA_CHOICES, gold="C")
    prompt = get_suite("aqua").prompt(sample)
    lines = prompt.splitlines()
    start = lines.index("A) 5(√3 + 1)")
    assert lines[start : start + 5] == [
        f"{letter}) {text}" for letter, text in zip("ABCDE", AQUA_CHOICES, strict=True)
    ]
    assert "A, B, C, D, E" in prompt and r"\boxed{}" in prompt
