"""Reading a move out of a model's reply."""

from __future__ import annotations

import time

import pytest

from games.actions import normalize_label, vocabulary
from games.parsing import extract_answer, parse_move
from games.spec import get_game

TTT_LEGAL = ["<X(0,0)>", "<X(1,1)>", "<X(2,2)>"]
HANABI_LEGAL = ["<Play card 1>", "<Discard card 2>", "<Reveal color R>"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("I think the centre.\n<answer><X(1,1)></answer>", "<X(1,1)>"),
        ("<answer>  <x(1, 1)>\n</answer>", "<X(1,1)>"),  # case and whitespace
        ("<ANSWER>X(2,2)</Answer>", "<X(2,2)>"),  # tag case, brackets left out
        ("<answer><X(0,0)></answer> then <answer><X(2,2)></answer>", "<X(2,2)>"),  # last wins
        ("<answer><X(0,0)></answer> trailing words", "<X(0,0)>"),
    ],
)
def test_tolerant_of_case_and_whitespace_and_takes_the_last_tag(reply: str, expected: str) -> None:
    move = parse_move(reply, TTT_LEGAL)
    assert move.ok and move.label == expected and move.error is None


def test_multiword_labels_match_without_spaces_or_case() -> None:
    assert parse_move("<answer>play CARD 1</answer>", HANABI_LEGAL).label == "<Play card 1>"
    assert parse_move("<answer><Reveal colorR></answer>", HANABI_LEGAL).label == "<Reveal color R>"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("<answer><X(0,1)></answer>", "not one of the legal actions"),  # legal shape, not legal now
        ("<answer><O(1,1)></answer>", "not one of the legal actions"),  # the other seat's mark
        ("<answer><X(1,1)> or <X(2,2)></answer>", "not one of the legal actions"),
        ("I play <X(1,1)>", "no <answer>"),  # no tag
        ("<answer><X(1,1)>", "no <answer>"),  # unclosed
        ("</answer><X(1,1)><answer>", "no <answer>"),  # tags in the wrong order
        ("<answer>   </answer>", "empty"),
        ("", "no <answer>"),
        ("\x00\x01 garbage ☃ <<<>>> </ans", "no <answer>"),
    ],
)
def test_invalid_replies_are_rejected_with_a_reason(reply: str, reason: str) -> None:
    move = parse_move(reply, TTT_LEGAL)
    assert not move.ok and move.label is None
    assert move.error is not None and reason in move.error


def test_strict_about_which_action_a_near_miss_is_invalid() -> None:
    assert not parse_move("<answer><X(1,1)>.</answer>", TTT_LEGAL).ok
    assert not parse_move("<answer>Play card 11</answer>", HANABI_LEGAL).ok


def test_a_100kb_reply_is_parsed_quickly_and_correctly() -> None:
    filler = "<answer> " * 12_000 + "x" * 4_000  # many unclosed tags: a quadratic scan would crawl
    started = time.perf_counter()
    garbage = parse_move(filler, TTT_LEGAL)
    valid = parse_move(filler + "<answer><X(2,2)></answer>", TTT_LEGAL)
    assert time.perf_counter() - started < 0.5
    assert len(filler) > 100_000
    assert not garbage.ok and valid.label == "<X(2,2)>"


def test_an_overlong_answer_is_invalid_even_if_it_mentions_an_action() -> None:
    reply = "<answer>" + "<X(1,1)> " * 100 + "</answer>"
    assert not parse_move(reply, TTT_LEGAL).ok


def test_extract_answer_returns_the_raw_inner_text() -> None:
    assert extract_answer("a <answer> B </answer> c") == " B "
    assert extract_answer("nothing") is None


@pytest.mark.parametrize(
    "game", ["tic_tac_toe", "connect_four", "kuhn_poker", "leduc_poker", "mini_hanabi"]
)
def test_vocabulary_is_invertible_for_every_seat(game: str) -> None:
    vocab = vocabulary(get_game(game))
    for seat, labels in enumerate(vocab.labels):
        assert len({normalize_label(x) for x in labels}) == len(labels)
        for action, label in enumerate(labels):
            assert vocab.action(seat, label) == action
            assert vocab.action(seat, label.lower().replace(" ", "")) == action
