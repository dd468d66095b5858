"""What a seat is shown: never the other seat's private cards, always exactly the legal actions."""

from __future__ import annotations

import random
import re

import pyspiel
import pytest

from games.actions import vocabulary
from games.catalog.hanabi import parse_observation
from games.prompts import SeatPrompter, legal_actions_in
from games.spec import GameSpec, get_game

ALL_GAMES = [
    "tic_tac_toe",
    "connect_four",
    "kuhn_poker",
    "leduc_poker",
    "mini_hanabi",
    "simple_hanabi",
]


def random_decision_states(
    spec: GameSpec, seed: int, episodes: int
) -> list[tuple[pyspiel.State, list[int]]]:
    """Every decision state of some random playouts, with the action history leading to it."""
    rng = random.Random(seed)
    found = []
    for _ in range(episodes):
        state = spec.game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                actions, probs = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(rng.choices(actions, probs)[0])
                continue
            found.append((state.clone(), list(state.history())))
            state.apply_action(rng.choice(state.legal_actions()))
    return found


def replay(
    spec: GameSpec,
    history: list[int],
    replace: dict[int, int] | None = None,
    resample: tuple[set[int], random.Random] | None = None,
) -> pyspiel.State | None:
    """Replay `history` with some chance outcomes replaced (or redrawn among the legal ones);
    None if the resulting deal makes a later action impossible."""
    replace = replace or {}
    state = spec.game.new_initial_state()
    for index, action in enumerate(history):
        if state.is_chance_node():
            legal = [a for a, _ in state.chance_outcomes()]
            if resample is not None and index in resample[0]:
                action = resample[1].choice(legal)
        else:
            legal = state.legal_actions()
        action = replace.get(index, action)
        if action not in legal:
            return None
        state.apply_action(action)
    return state


def seat_texts(spec: GameSpec, state: pyspiel.State, seat: int) -> list[str]:
    """Everything a seat's prompts show of this state, in both prompt styles."""
    view = spec.view(state, seat)
    legal = vocabulary(spec).legal_labels(state, seat)
    texts = [view.state, view.compact]
    for style in ("full", "compact"):
        messages, _ = SeatPrompter(spec, seat, style).turn_messages(state, legal, [])
        texts += [m["content"] for m in messages]
    return texts


@pytest.mark.parametrize(
    ("game", "card_slots", "deck"),
    [("kuhn_poker", (0, 1), range(3)), ("leduc_poker", (0, 1), range(6))],
)
def test_poker_views_do_not_depend_on_the_opponents_card(
    game: str, card_slots: tuple[int, int], deck: range
) -> None:
    spec = get_game(game)
    checked = 0
    for state, history in random_decision_states(spec, seed=1, episodes=60):
        seat = state.current_player()
        opponent_slot = card_slots[1 - seat]
        seen = {history[card_slots[seat]]}
        public = re.search(r"\[Public: (\d+)\]", state.information_state_string(seat))
        if public:  # Leduc's public card, once dealt
            seen.add(int(public.group(1)))
        for other in deck:
            if other == history[opponent_slot] or other in seen:
                continue
            twin = replay(spec, history, {opponent_slot: other})
            if twin is None:
                continue
            assert seat_texts(spec, twin, seat) == seat_texts(spec, state, seat)
            assert twin.information_state_string(1 - seat) != state.information_state_string(
                1 - seat
            )  # the twin really differs, for the opponent
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("game", ["mini_hanabi", "simple_hanabi"])
def test_hanabi_first_mover_cannot_see_its_own_hand(game: str) -> None:
    spec = get_game(game)
    hand = spec.params["hand_size"]
    rng = random.Random(4)
    compared = 0
    for _ in range(30):
        state = spec.game.new_initial_state()
        deal = []
        while state.is_chance_node():
            actions, probs = zip(*state.chance_outcomes(), strict=True)
            deal.append(rng.choices(actions, probs)[0])
            state.apply_action(deal[-1])
        # Seat 0's cards are dealt first: give it other cards, keep the partner's hand.
        for _ in range(5):
            twin = replay(spec, deal, resample=(set(range(hand)), rng))
            if twin is None or [twin.history()[i] for i in range(hand)] == deal[:hand]:
                continue
            assert seat_texts(spec, twin, 0) == seat_texts(spec, state, 0)
            assert twin.observation_string(1) != state.observation_string(1)
            compared += 1
    assert compared >= 20


@pytest.mark.parametrize("game", ["mini_hanabi", "simple_hanabi"])
def test_hanabi_second_mover_cannot_see_its_own_hand(game: str) -> None:
    spec = get_game(game)
    hand = spec.params["hand_size"]
    rng = random.Random(5)
    compared = 0
    for _ in range(40):
        state = spec.game.new_initial_state()
        history = []
        while state.is_chance_node():
            actions, probs = zip(*state.chance_outcomes(), strict=True)
            history.append(rng.choices(actions, probs)[0])
            state.apply_action(history[-1])
        play_first_card = hand  # action ids: discards 0..hand-1, then plays
        state.apply_action(play_first_card)
        history.append(play_first_card)
        while state.is_chance_node():  # the first mover's replacement draw
            history.append(state.chance_outcomes()[0][0])
            state.apply_action(history[-1])
        for _ in range(5):
            twin = replay(spec, history, resample=(set(range(hand, 2 * hand)), rng))
            if twin is None or twin.history()[hand : 2 * hand] == history[hand : 2 * hand]:
                continue
            assert seat_texts(spec, twin, 1) == seat_texts(spec, state, 1)
            compared += 1
    assert compared >= 20


@pytest.mark.parametrize("game", ["mini_hanabi", "simple_hanabi"])
def test_hanabi_own_cards_show_only_what_hints_revealed(game: str) -> None:
    spec = get_game(game)
    card = re.compile(r"\b[RYGWB][1-5]\b")
    for state, _ in random_decision_states(spec, seed=2, episodes=20):
        seat = state.current_player()
        view = spec.view(state, seat)
        own = view.state.split("Your hand")[1].split("Your partner's hand")[0]
        assert not card.search(own) and own.count("hidden;") == spec.params["hand_size"]
        assert card.search(view.state.split("Your partner's hand")[1])  # partner cards shown
        # Compact: one token per own card, '?' wherever no hint was given. The true cards are
        # what the partner sees of this seat's hand.
        truth = parse_observation(state.observation_string(1 - seat)).partner_hand
        knowledge = parse_observation(state.observation_string(seat)).own_hand
        tokens = view.compact.split("you: ")[1].split(" (hints)")[0].split()
        for token, real, known in zip(tokens, truth, knowledge, strict=True):
            assert token == known.hinted.replace("X", "?")
            for shown, actual in zip(token, real.card, strict=True):
                assert shown in ("?", actual)


@pytest.mark.parametrize("game", ALL_GAMES)
@pytest.mark.parametrize("style", ["full", "compact", "numbered"])
def test_listed_legal_actions_are_exactly_openspiels(game: str, style: str) -> None:
    spec = get_game(game)
    vocab = vocabulary(spec)
    for state, _ in random_decision_states(spec, seed=3, episodes=8):
        seat = state.current_player()
        legal = vocab.legal_labels(state, seat)
        messages, _ = SeatPrompter(spec, seat, style).turn_messages(state, legal, [])
        listed = legal_actions_in(messages[-1]["content"])
        assert [vocab.action(seat, label) for label in listed] == state.legal_actions()


@pytest.mark.parametrize("game", ALL_GAMES)
def test_compact_prompts_stay_short(game: str) -> None:
    # ~300 tokens of the embedded tiny model's tokenizer is about 700 characters at the least;
    # measured worst cases are 108-232 tokens (see docs/games.md).
    spec = get_game(game)
    for state, _ in random_decision_states(spec, seed=6, episodes=10):
        seat = state.current_player()
        legal = vocabulary(spec).legal_labels(state, seat)
        messages, _ = SeatPrompter(spec, seat, "compact").turn_messages(state, legal, [])
        assert len(messages) == 1 and len(messages[0]["content"]) < 700
        assert "<answer>ACTION</answer>" in messages[0]["content"]


def test_full_prompt_parts_and_growing_chat() -> None:
    spec = get_game("tic_tac_toe")
    prompter = SeatPrompter(spec, 1, "full")
    state = spec.game.new_initial_state()
    state.apply_action(4)
    legal = vocabulary(spec).legal_labels(state, 1)
    first, reused = prompter.turn_messages(state, legal, [(0, "<X(1,1)>")])
    assert reused == 0 and [m["role"] for m in first] == ["system", "user"]
    assert "Tic-Tac-Toe" in first[0]["content"]
    for part in ("# Game rules", "# Your seat", "# How to answer", "You are O"):
        assert part in first[1]["content"]
    assert "chose <X(1,1)>; the position after that move is shown below" in first[1]["content"]
    prompter.accept_reply("thinking <answer><O(0,0)></answer>")
    state.apply_action(0)
    state.apply_action(8)
    second, reused = prompter.turn_messages(
        state,
        vocabulary(spec).legal_labels(state, 1),
        [(0, "<X(1,1)>"), (1, "<O(0,0)>"), (0, "<X(2,2)>")],
    )
    assert reused == 3 and len(second) == 4
    assert second[2] == {"role": "assistant", "content": "thinking <answer><O(0,0)></answer>"}
    assert "# Game rules" not in second[3]["content"]
    assert "chose <X(2,2)>" in second[3]["content"] and "<X(1,1)>" not in second[3]["content"]


def test_imperfect_information_history_shows_only_the_chosen_action() -> None:
    spec = get_game("kuhn_poker")
    state = spec.game.new_initial_state()
    for action in (2, 0, 1):  # deal K, J; player 1 bets
        state.apply_action(action)
    legal = vocabulary(spec).legal_labels(state, 1)
    messages, _ = SeatPrompter(spec, 1, "full").turn_messages(state, legal, [(0, "<BET>")])
    text = messages[-1]["content"]
    assert "Your opponent (Player 1) chose <BET>." in text
    assert "position after" not in text
    assert "Your card: J" in text and "K" not in text.split("# Turn 1")[1]
