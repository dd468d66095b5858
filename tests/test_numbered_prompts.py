"""The `numbered` prompt style: the legal list numbered, the answer a number of it.

Every reader of a numbered reply (the arena's engine, exploitability sampling, the pre-training
data and its evaluation) must map a number to the label at that place of the legal list, and
must not read anything else as a move.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from core.endpoint import Completion, Usage
from games.actions import vocabulary
from games.engine import EpisodeOptions, play_episode
from games.exploitability import sample_state
from games.infostates import information_states
from games.parsing import parse_move
from games.players import PlayerContext, make_player
from games.players.llm import FunctionPlayer
from games.prompts import SeatPrompter, legal_actions_in
from games.spec import get_game
from train_backend.pretrain.examples import held_out_examples, training_examples
from train_backend.pretrain.format_eval import score_reply
from train_backend.pretrain.recipe import PretrainSettings
from train_backend.pretrain.teacher_replies import ReplyTeacher

LEGAL = ["<PASS>", "<BET>", "<FOLD>"]


@pytest.mark.parametrize(
    ("reply", "mode", "expected"),
    [
        ("<answer>2</answer>", "lenient", "<BET>"),
        ("I pick.\n<answer> 3 </answer>", "lenient", "<FOLD>"),
        ("<answer>1</answer> <answer>3</answer>", "lenient", "<FOLD>"),  # the last tag
        ("<think>hm</think>\n<answer>1</answer>", "strict", "<PASS>"),
        ("<answer>2</answer>", "strict", "<BET>"),
    ],
)
def test_a_number_reads_as_the_label_at_that_place(reply: str, mode: str, expected: str) -> None:
    move = parse_move(reply, LEGAL, mode, numbered=True)  # type: ignore[arg-type]
    assert move.ok and move.label == expected


@pytest.mark.parametrize(
    "reply",
    [
        "<answer><BET></answer>",  # a label is not a number
        "<answer>0</answer>",
        "<answer>4</answer>",  # past the list
        "<answer>02</answer>",
        "<answer>-1</answer>",
        "<answer>2.0</answer>",
        "<answer>1 2</answer>",  # two numbers, not 12 (lenient drops spaces inside labels)
        "<answer>1 0</answer>",
        "<answer></answer>",
        "2",  # no tag
    ],
)
def test_anything_but_a_number_of_the_list_is_invalid(reply: str) -> None:
    move = parse_move(reply, LEGAL, numbered=True)
    assert not move.ok and move.error


def test_spaces_never_join_digits_into_another_number() -> None:
    legal = [f"<L{i}>" for i in range(12)]
    assert not parse_move("<answer>1 2</answer>", legal, numbered=True).ok
    assert parse_move("<answer>12</answer>", legal, numbered=True).label == "<L11>"
    assert parse_move("<answer> < 12 > </answer>", legal, numbered=True).label == "<L11>"
    missing = parse_move("I pick 2", legal, numbered=True)
    assert not missing.ok and "NUMBER" in (missing.error or "")


def test_strict_numbered_answers_keep_the_strict_shape() -> None:
    assert not parse_move("words <answer>2</answer>", LEGAL, "strict", numbered=True).ok
    assert not parse_move("<answer> <2> </answer>", LEGAL, "strict", numbered=True).ok


def test_the_numbered_prompt_lists_numbers_before_labels() -> None:
    spec = get_game("tic_tac_toe")
    state = spec.game.new_initial_state()
    state.apply_action(4)
    legal = vocabulary(spec).legal_labels(state, 1)
    messages, _ = SeatPrompter(spec, 1, "numbered").turn_messages(state, legal, [(0, "<X(1,1)>")])
    text = messages[-1]["content"]
    line = next(x for x in text.splitlines() if x.startswith("Legal:"))
    assert line == "Legal: " + " ".join(f"{i} {label}" for i, label in enumerate(legal, 1))
    assert "<answer>NUMBER</answer>" in text
    assert legal_actions_in(text) == legal  # scripted servers still read the labels


def _number_player(pick: str) -> FunctionPlayer:
    """A model seat that answers the number of the first or last legal label."""

    async def respond(messages: list[dict[str, str]], seat: int, seed: int) -> Completion:
        legal = legal_actions_in(messages[-1]["content"])
        number = 1 if pick == "first" else len(legal)
        return Completion(text=f"<answer>{number}</answer>", usage=Usage(completion_tokens=3))

    return FunctionPlayer(respond, name="llm")


def _label_player(pick: str) -> FunctionPlayer:
    async def respond(messages: list[dict[str, str]], seat: int, seed: int) -> Completion:
        legal = legal_actions_in(messages[-1]["content"])
        label = legal[0] if pick == "first" else legal[-1]
        return Completion(text=f"<answer>{label}</answer>", usage=Usage(completion_tokens=3))

    return FunctionPlayer(respond, name="llm")


@pytest.mark.parametrize("game", ["tic_tac_toe", "leduc_poker", "connect_four"])
def test_a_numbered_game_plays_the_moves_the_numbers_name(game: str) -> None:
    """Answering the last number plays exactly what answering the last label plays in compact."""
    spec = get_game(game)
    bot = make_player("random", PlayerContext(spec=spec))
    for seed in range(3):
        numbered = asyncio.run(
            play_episode(
                spec, [_number_player("last"), bot], seed, EpisodeOptions(prompt_style="numbered")
            )
        )
        compact = asyncio.run(
            play_episode(
                spec, [_label_player("last"), bot], seed, EpisodeOptions(prompt_style="compact")
            )
        )
        assert [t["action"] for t in numbered.turns] == [t["action"] for t in compact.turns]
        assert numbered.returns == compact.returns
        assert all(t.get("legal", True) for t in numbered.turns)


def test_a_label_answer_to_a_numbered_prompt_forfeits() -> None:
    spec = get_game("kuhn_poker")
    bot = make_player("random", PlayerContext(spec=spec))
    result = asyncio.run(
        play_episode(
            spec, [_label_player("first"), bot], 0, EpisodeOptions(prompt_style="numbered")
        )
    )
    model_turns = [t for t in result.turns if "reply" in t]
    assert len(model_turns) == 1 and model_turns[0]["legal"] is False


def test_exploitability_counts_numbered_answers_as_their_moves() -> None:
    spec = get_game("kuhn_poker")
    state = information_states(spec)[0]

    async def respond(messages: list[dict[str, str]], seat: int, k: int) -> Completion:
        assert "Legal: 1 " in messages[-1]["content"]
        text = "<answer>2</answer>" if k % 4 else "<answer><PASS></answer>"
        return Completion(text=text, usage=Usage(completion_tokens=3))

    tally = asyncio.run(sample_state(spec, state, respond, samples=8, style="numbered"))
    assert tally.invalid == 2  # the label answers
    assert tally.counts[1] == 6 and tally.counts[0] == 0


def test_numbered_pretraining_examples_answer_the_number_of_their_move() -> None:
    settings = PretrainSettings(
        games=["kuhn_poker", "tic_tac_toe"],
        prompt_style="numbered",
        examples=60,
        full_share=0.0,
        arithmetic_share=0.0,
        eval_positions=6,
        eval_full_positions=0,
        reply_style="restate",
        # Kuhn's replies drawn from CFR (named after the position is kept), Tic-Tac-Toe's as is
        reply_teachers={"kuhn_poker": ReplyTeacher(policy="cfr:50", random_share=0.3)},
    )
    examples = training_examples([get_game(g) for g in settings.games], settings)
    assert {e.style for e in examples} == {"numbered"}
    for example in examples:
        assert parse_move(example.reply, list(example.legal), numbered=True).label == example.move
        assert example.move not in example.reply  # the number alone names the move
        assert "Legal: 1 " in example.messages[-1]["content"]
        assert score_reply(example, example.reply) == (True, True)
        wrong = re.sub(
            r"<answer>\d+</answer>", f"<answer>{len(example.legal) + 1}</answer>", example.reply
        )
        assert score_reply(example, wrong) == (False, False)
    held_out = held_out_examples([get_game(g) for g in settings.games], settings)
    assert held_out and {e.style for e in held_out} == {"numbered"}


def test_a_numbered_recipe_is_a_new_recipe() -> None:
    plain = PretrainSettings()
    assert "prompt_style" not in plain.recipe()  # cached compact starts are still found
    assert PretrainSettings(prompt_style="numbered").recipe()["prompt_style"] == "numbered"


@pytest.mark.parametrize("reply_style", ["choose", "restate_all"])
def test_relabelled_numbered_examples_answer_the_same_number(reply_style: str) -> None:
    """Renamed words and labels, the list's order kept: the reply's number is unchanged and
    names the renamed move."""
    settings = PretrainSettings(
        games=["kuhn_poker", "tic_tac_toe"],
        prompt_style="numbered",
        relabel_share=1.0,
        reply_style=reply_style,  # type: ignore[arg-type]
        examples=40,
        full_share=0.0,
        arithmetic_share=0.0,
    )
    plain = settings.model_copy(update={"relabel_share": 0.0})
    specs = [get_game(g) for g in settings.games]
    renamed, originals = training_examples(specs, settings), training_examples(specs, plain)
    assert len(renamed) == len(originals)
    changed = 0
    for example, original in zip(renamed, originals, strict=True):
        number = re.search(r"<answer>(\d+)</answer>", example.reply)
        assert number and number[0] in original.reply  # the same number
        assert parse_move(example.reply, list(example.legal), numbered=True).label == example.move
        assert "Reply <answer>NUMBER</answer>." in example.messages[-1]["content"]
        assert re.search(r"^Legal: 1 <", example.messages[-1]["content"], re.M)
        changed += example.legal != original.legal or example.messages != original.messages
    assert changed >= len(renamed) * 0.9
