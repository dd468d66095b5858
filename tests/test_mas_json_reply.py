"""Lenient JSON reading of agent replies, and the answer helpers the protocols vote with."""

from __future__ import annotations

import time

import pytest

from mas.answers import answer_key, extract_answer
from mas.base import Task
from mas.json_reply import normalised_keys, parse_json_object
from mas.mad import parse_debate_verdict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"side": "negative", "answer": "42"}', {"side": "negative", "answer": "42"}),
        ('Verdict below.\n{"a": 1}\nThat is all.', {"a": 1}),
        ('```json\n{"a": 1, "b": [1, 2,],}\n```', {"a": 1, "b": [1, 2]}),
        ("```\n{'a': 'x'}\n```", {"a": "x"}),
        (
            "{'reason': 'the affirmative side's sum is off', 'ok': True, 'x': None}",
            {"reason": "the affirmative side's sum is off", "ok": True, "x": None},
        ),
        ("{side: negative, answer: 3}", {"side": "negative", "answer": 3}),
        ('first {"a": 1} then the real one {"b": 2}', {"b": 2}),
        ('{"a": 1}\n```json\n{"fenced": true}\n```\n{"c": 3}', {"fenced": True}),
        ('{"a": "a } inside", "n": {"deep": [1]}}', {"a": "a } inside", "n": {"deep": [1]}}),
        ("{'a': 'say \"hi\"'}", {"a": 'say "hi"'}),
    ],
)
def test_parse_json_object_finds_and_repairs_objects(text: str, expected: dict) -> None:
    assert parse_json_object(text) == expected


def test_latex_in_json_strings_keeps_its_backslashes() -> None:
    text = r'{"answer": "\frac{1}{2}", "box": "\boxed{3}", "root": "\sqrt{2}", "op": "\times"}'
    assert parse_json_object(text) == {
        "answer": "\\frac{1}{2}",
        "box": "\\boxed{3}",
        "root": "\\sqrt{2}",
        "op": "\\times",
    }
    # Real JSON escapes still mean what they say.
    assert parse_json_object(r'{"a": "line\nnext \u00e9 \"q\" \\frac"}') == {
        "a": 'line\nnext é "q" \\frac'
    }


@pytest.mark.parametrize(
    "text", ["", "no braces at all", "{unclosed", "{'a': }", "[1, 2, 3]", "{" * 5000]
)
def test_unreadable_text_gives_none(text: str) -> None:
    assert parse_json_object(text) is None


def test_pathological_input_is_fast() -> None:
    started = time.perf_counter()
    parse_json_object("{" * 100_000)
    parse_json_object('{"a": 1, ' * 20_000 + "}")
    assert time.perf_counter() - started < 2.0


def test_normalised_keys() -> None:
    assert normalised_keys({"Supported Side": 1, "debate_answer": 2}) == {
        "supportedside": 1,
        "debateanswer": 2,
    }


def test_verdict_reads_original_mad_keys_and_declines() -> None:
    verdict = parse_debate_verdict(
        "{'Whether there is a preference': 'Yes', 'Supported Side': 'Negative', "
        "'Reason': 'it adds correctly', 'debate_answer': '7'}"
    )
    assert (verdict.parsed, verdict.side, verdict.answer, verdict.decisive) == (
        True,
        "negative",
        "7",
        True,
    )
    declined = parse_debate_verdict(
        '{"Whether there is a preference": "No", "Supported Side": "", "debate_answer": ""}'
    )
    assert declined.parsed and not declined.decisive
    empty = parse_debate_verdict('{"preferred_side": "none", "answer": "None"}')
    assert empty.parsed and not empty.decisive
    assert not parse_debate_verdict("the negative side wins").parsed


def test_answer_keys_group_equal_answers() -> None:
    assert answer_key("18") == answer_key("18.0") == answer_key("\\$18") == answer_key("18.")
    assert answer_key("1,000") == answer_key("1000")
    assert answer_key("x + 1") == answer_key("x+1") != answer_key("x+2")
    assert answer_key("(b)", "choice") == answer_key("B", "choice") == answer_key("B) 45", "choice")
    assert answer_key("A", "choice") != answer_key("B", "choice")


def test_extract_answer_uses_the_suite_and_falls_back_to_boxed() -> None:
    text = "so it is \\boxed{12}. The answer is 13"
    assert extract_answer(Task(prompt="p", suite="gsm8k"), "The answer is 13") == "13"
    assert extract_answer(Task(prompt="p"), text) == "12"
    assert extract_answer(Task(prompt="p"), "The answer is 13") is None
    assert extract_answer(Task(prompt="p", suite="aqua", kind="choice"), "\\boxed{(C)}") == "C"
    # An unknown suite name falls back instead of failing the sample.
    assert extract_answer(Task(prompt="p", suite="no-such-suite"), text) == "12"
