"""Teacher replies drawn from strong policies with real OpenSpiel: CFR in Kuhn poker (the
replies' action shares follow the teacher's mixed strategy), MCTS visit counts on the boards
(replies legal and varied at one position, a win at once always taken), and the recipe field
that asks for them."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterator

import pyspiel
import pytest
from pydantic import ValidationError

from games.actions import vocabulary
from games.parsing import parse_move
from games.spec import GameSpec, get_game
from train_backend.pretrain.format_data import build_teachers, game_examples, state_note
from train_backend.pretrain.recipe import PretrainSettings
from train_backend.pretrain.teacher_replies import ReplySampler, ReplyTeacher, tempered


def _decisions(spec: GameSpec) -> Iterator[pyspiel.State]:
    """Every decision state of a small game (all deals, all histories)."""
    stack = [spec.game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            yield state
        actions = [a for a, _ in state.chance_outcomes()] if state.is_chance_node() else None
        for action in actions or state.legal_actions():
            stack.append(state.child(action))


def test_tempering_and_random_moves_set_the_level() -> None:
    weights = {0: 0.75, 1: 0.25}
    assert tempered(weights, [0, 1], 1.0, 0.0) == pytest.approx({0: 0.75, 1: 0.25})
    flatter = tempered(weights, [0, 1], 2.0, 0.0)  # sqrt(3):1
    assert flatter[0] == pytest.approx(3**0.5 / (3**0.5 + 1))
    mixed = tempered(weights, [0, 1], 1.0, 0.4)
    assert mixed == pytest.approx({0: 0.6 * 0.75 + 0.2, 1: 0.6 * 0.25 + 0.2})
    assert tempered({0: 1.0}, [0, 1, 2], 1.0, 0.3)[2] == pytest.approx(0.1)  # never-played: 0.1
    assert tempered({}, [4, 5], 1.0, 0.0) == {4: 0.5, 5: 0.5}  # no weights: uniform


def test_cfr_teacher_replies_on_kuhn_follow_its_mixed_strategy() -> None:
    spec = get_game("kuhn_poker")
    teacher = ReplyTeacher(policy="cfr:300", random_share=0.3)
    sampler = ReplySampler(spec, teacher, seed=0)
    vocab = vocabulary(spec)
    # What the teacher plays at each position, by the line a restating reply begins with.
    expected: dict[str, dict[str, float]] = {}
    for state in _decisions(spec):
        seat = state.current_player()
        distribution = sampler.distribution(state)
        expected[state_note(spec, state, seat)] = {
            vocab.label(seat, a): p for a, p in distribution.items()
        }
    # CFR never calls a bet with the J: only the random share does (half of 0.3).
    facing_with_j = expected["card J; bets: opponent BET; pot you 1 opp 2"]
    assert facing_with_j["<BET>"] == pytest.approx(0.15, abs=0.01)
    examples = game_examples(
        spec,
        "compact",
        count=3000,
        first_seed=0,
        teachers=build_teachers(spec, ["random", "cfr:300"]),
        per_episode=4,
        restate=True,
        reply_sampler=sampler,
    )
    named: dict[str, Counter[str]] = defaultdict(Counter)
    for example in examples:
        note, answer = example.reply.split("\n")
        assert parse_move(answer, list(example.legal)).label == example.move  # legal
        named[note][example.move] += 1
    compared = 0
    for note, counts in named.items():
        n = sum(counts.values())
        if n < 100:
            continue
        share = counts["<BET>"] / n
        p = expected[note]["<BET>"]
        assert abs(share - p) < 4 * (p * (1 - p) / n) ** 0.5 + 0.01, (note, share, p)
        compared += 1
    assert compared >= 8  # most of Kuhn's 12 positions, each seen 100+ times


def test_mcts_teacher_replies_vary_at_one_position_and_are_legal() -> None:
    rng = random.Random(0)
    for name, sims in (("tic_tac_toe", 100), ("connect_four", 50)):
        spec = get_game(name)
        sampler = ReplySampler(spec, ReplyTeacher(policy=f"mcts:{sims}"), seed=1)
        state = spec.game.new_initial_state()
        state.apply_action(state.legal_actions()[0])  # the second player's first move
        draws = Counter(sampler.sample(state, rng) for _ in range(40))
        assert set(draws) <= set(state.legal_actions())
        assert len(draws) >= 3 and max(draws.values()) < 30  # varied, not one fixed move
    # A move that wins at once is always taken (visit counts alone give it one visit in 200).
    spec = get_game("connect_four")
    sampler = ReplySampler(spec, ReplyTeacher(policy="mcts:100"), seed=1)
    state = spec.game.new_initial_state()
    for action in (0, 6, 0, 6, 0, 5):  # three in column 0, the first player to move
        state.apply_action(action)
    assert {sampler.sample(state, rng) for _ in range(20)} == {0}


def test_board_examples_name_legal_varied_teacher_moves_reproducibly() -> None:
    spec = get_game("tic_tac_toe")

    def examples(seed: int) -> list:
        sampler = ReplySampler(spec, ReplyTeacher(policy="mcts:50", random_share=0.2), seed)
        return game_examples(
            spec, "compact", count=120, first_seed=seed, teachers=build_teachers(spec, ["random"]),
            per_episode=4, reply_sampler=sampler,
        )  # fmt: skip

    first = examples(5)
    for example in first:
        assert parse_move(example.reply, list(example.legal)).label == example.move
    assert len({e.move for e in first}) >= 12  # both marks, many cells: no fixed rule
    last_listed = sum(e.move == e.legal[-1] for e in first) / len(first)
    assert last_listed < 0.5
    assert [e.reply for e in examples(5)] == [e.reply for e in first]  # a seed fixes the data


def test_a_recipe_asks_for_teachers_its_games_can_have() -> None:
    settings = PretrainSettings(
        games=["kuhn_poker"], reply_teachers={"kuhn_poker": {"policy": "cfr:300"}}
    )
    assert settings.recipe()["reply_teachers"]["kuhn_poker"]["policy"] == "cfr:300"
    assert "reply_teachers" not in PretrainSettings().recipe()  # earlier builds stay found
    for games, teachers, message in [
        (["kuhn_poker"], {"leduc_poker": {"policy": "cfr:300"}}, "not among the games"),
        (["tic_tac_toe"], {"tic_tac_toe": {"policy": "cfr:300"}}, "needs a poker game"),
        (["kuhn_poker"], {"kuhn_poker": {"policy": "mcts:10"}}, "perfect-information"),
        (["tic_tac_toe"], {"tic_tac_toe": {"policy": "minimax"}}, "one of cfr:ITERS"),
        (["tic_tac_toe"], {"tic_tac_toe": {"policy": "mcts:0"}}, "must be positive"),
        (["kuhn_poker"], {"kuhn_poker": {"policy": "nash", "temperature": 0}}, "greater than 0"),
    ]:
        with pytest.raises(ValidationError, match=message):
            PretrainSettings(games=games, reply_teachers=teachers)


def test_a_recipes_reply_teachers_decide_its_training_replies() -> None:
    from train_backend.pretrain.examples import training_examples

    poker = PretrainSettings(
        games=["kuhn_poker"], examples=600, arithmetic_share=0.0, reply_style="restate",
        teachers={"kuhn_poker": ["random"]},
        reply_teachers={"kuhn_poker": {"policy": "cfr:300", "random_share": 0.6}},
    )  # fmt: skip
    examples = training_examples([get_game("kuhn_poker")], poker)
    facing = [e for e in examples if e.reply.startswith("card J; bets: opponent BET")]
    calls = sum(e.move == "<BET>" for e in facing) / len(facing)
    assert len(facing) > 40 and 0.15 < calls < 0.45  # 0.3: CFR never calls, the random share half
    board = PretrainSettings(
        games=["tic_tac_toe"], examples=200, arithmetic_share=0.0, full_share=0.0,
        reply_teachers={"tic_tac_toe": {"policy": "mcts:20"}},
    )  # fmt: skip
    examples = training_examples([get_game("tic_tac_toe")], board)
    # last_listed_share is 1.0 by default: without the teacher every reply would copy it
    assert sum(e.move == e.legal[-1] for e in examples) / len(examples) < 0.5
