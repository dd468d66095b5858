"""Synthetic text for the embedded tiny model: game turns, word problems, multiple choice.

The text only has to look like what the harness sends and expects back (chat wrappers, legal
action strings such as `<X(0,0)>` or `<Play card 1>`, `<answer>...</answer>` replies, `\\boxed{N}`
answers, lettered options), so that the locally trained tokenizer has compact pieces for them and
the short pre-training teaches the reply format. Everything is drawn from one `random.Random`, so
a seed fixes the corpus exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# Bump whenever the generated text changes: cached tiny models built from older text get rebuilt.
CORPUS_VERSION = 2

Messages = list[dict[str, str]]

_NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Jia", "Kofi"]
_ITEMS = ["apples", "marbles", "books", "coins", "pencils", "stamps", "cookies", "cards", "shells"]
_SUBJECTS = ["physics", "chemistry", "biology", "algebra", "geometry", "astronomy", "statistics"]


def render_chat(messages: Messages, *, add_generation_prompt: bool = False) -> str:
    """The Qwen chat layout, written out as the tokenizer's chat template renders it."""
    parts = [f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages]
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def _reply(rng: random.Random, reasoning: str, answer: str) -> str:
    # No <think> block: a 1M model often fails to close one, and `transformers serve` then files
    # the whole reply under reasoning_content, leaving no answer. The tags stay in the vocabulary.
    return f"{reasoning}\n<answer>{answer}</answer>"


def _game_system(game: str) -> str:
    return f"You are playing {game}. Think about the game and choose the best action."


def _game_chat(rng: random.Random, game: str, user: str, reasoning: str, choice: str) -> Messages:
    """A game turn: the game's system prompt, the position (`user`), the reasoned action."""
    return [
        {"role": "system", "content": _game_system(game)},
        {"role": "user", "content": user},
        {"role": "assistant", "content": _reply(rng, reasoning, choice)},
    ]


def _instructions() -> str:
    return (
        "Reason step by step, then give your action as <answer>ACTION</answer>, "
        "where ACTION is exactly one of the legal actions."
    )


def _tic_tac_toe(rng: random.Random) -> Messages:
    board = [["." for _ in range(3)] for _ in range(3)]
    marks = "XO"
    cells = [(r, c) for r in range(3) for c in range(3)]
    rng.shuffle(cells)
    for i in range(rng.randint(0, 6)):
        r, c = cells[i]
        board[r][c] = marks[i % 2]
    me = marks[rng.randint(0, 1)]
    free = [(r, c) for r in range(3) for c in range(3) if board[r][c] == "."]
    legal = [f"<{me}({r},{c})>" for r, c in free]
    choice = rng.choice(legal)
    state = "\n".join("".join(row) for row in board)
    user = (
        "Rules: players take turns marking a cell of a 3x3 grid; three in a row wins.\n"
        f"You are player {me}.\nCurrent board:\n{state}\n"
        f"Legal actions: {', '.join(legal)}\n{_instructions()}"
    )
    reasoning = f"I am {me}. The free cells are {len(free)}. I take the cell {choice}."
    return _game_chat(rng, "Tic-Tac-Toe", user, reasoning, choice)


def _connect_four(rng: random.Random) -> Messages:
    heights = [rng.randint(0, 6) for _ in range(7)]
    legal = [f"<{'xo'[rng.randint(0, 1)]}{c}>" for c in range(7) if heights[c] < 6]
    legal = legal or ["<x3>"]
    choice = rng.choice(legal)
    user = (
        "Rules: drop pieces into a 7-column, 6-row grid; four in a line wins.\n"
        f"Column heights: {heights}\nLegal actions: {', '.join(legal)}\n{_instructions()}"
    )
    reasoning = f"The center matters most. I drop {choice}."
    return _game_chat(rng, "Connect Four", user, reasoning, choice)


def _poker(rng: random.Random) -> Messages:
    game = rng.choice(["Kuhn Poker", "Leduc Hold'em"])
    cards = ["J", "Q", "K"] if game == "Kuhn Poker" else ["J1", "J2", "Q1", "Q2", "K1", "K2"]
    card = rng.choice(cards)
    history = " ".join(rng.choice(["<BET>", "<PASS>", "<CALL>", "<RAISE>"]) for _ in range(2))
    if game == "Kuhn Poker":
        legal = rng.choice([["<PASS>", "<BET>"], ["<PASS>", "<BET>"], ["<FOLD>", "<CALL>"]])
    else:
        legal = rng.choice([["<CALL>", "<RAISE>"], ["<FOLD>", "<CALL>", "<RAISE>"]])
    choice = legal[-1] if card.startswith("K") else rng.choice(legal)
    seat = rng.randint(0, 1)
    user = (
        f"Rules of {game}: each player antes one chip and gets a private card; "
        "the higher card wins the pot at showdown.\n"
        f"You are player {seat}. Your card: {card}. Pot: {rng.randint(2, 13)} chips.\n"
        f"Opponent actions so far: {history}\nLegal actions: {', '.join(legal)}\n{_instructions()}"
    )
    reasoning = f"My card is {card}. Against this history I choose {choice}."
    return _game_chat(rng, game, user, reasoning, choice)


def _hanabi(rng: random.Random) -> Messages:
    hand_size = rng.choice([3, 5])
    colors = "RY" if hand_size == 3 else "RYG"
    legal = [f"<Play card {i}>" for i in range(1, hand_size + 1)]
    legal += [f"<Discard card {i}>" for i in range(1, hand_size + 1)]
    legal += [f"<Reveal player +1 color {c}>" for c in colors]
    legal += [f"<Reveal player +1 rank {r}>" for r in (1, 2)]
    choice = rng.choice(legal)
    other = " ".join(f"{rng.choice(colors)}{rng.randint(1, 2)}" for _ in range(hand_size))
    user = (
        "Rules: a cooperative card game; play cards of each color in rank order.\n"
        f"Life tokens: {rng.randint(1, 3)}. Info tokens: {rng.randint(0, 8)}. "
        f"Fireworks: {' '.join(f'{c}{rng.randint(0, 2)}' for c in colors)}\n"
        f"Other player's hand: {other}\nLegal actions: {', '.join(legal)}\n{_instructions()}"
    )
    reasoning = f"My partner holds {other}. The most useful move is {choice}."
    return _game_chat(rng, "Hanabi", user, reasoning, choice)


def _word_problem(rng: random.Random) -> Messages:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b = rng.randint(2, 60), rng.randint(1, 40)
    kind = rng.randint(0, 2)
    if kind == 0:
        question = f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have?"
        answer, work = a + b, f"{a} + {b} = {a + b}"
    elif kind == 1:
        b = min(b, a)
        question = f"{name} has {a} {item} and gives away {b}. How many {item} are left?"
        answer, work = a - b, f"{a} - {b} = {a - b}"
    else:
        a, b = a % 12 + 2, b % 9 + 2
        question = f"{name} fills {a} boxes with {b} {item} each. How many {item} in total?"
        answer, work = a * b, f"{a} * {b} = {a * b}"
    content = f"{work}. The answer is \\boxed{{{answer}}}."
    if rng.random() < 0.4:
        content = f"{THINK_OPEN}\n{work}\n{THINK_CLOSE}\n\n\\boxed{{{answer}}}"
    return [
        {"role": "user", "content": f"{question}\nPut your final answer in \\boxed{{}}."},
        {"role": "assistant", "content": content},
    ]


def _multiple_choice(rng: random.Random) -> Messages:
    subject = rng.choice(_SUBJECTS)
    x, y = rng.randint(2, 30), rng.randint(2, 30)
    right = x + y
    options = sorted({right, right + rng.randint(1, 5), right - rng.randint(1, 5), x * y})
    while len(options) < 4:
        options.append(options[-1] + 7)
    letters = "ABCD"
    shown = "\n".join(f"({letters[i]}) {v}" for i, v in enumerate(options[:4]))
    letter = letters[options.index(right)]
    question = f"A {subject} quiz asks: what is {x} plus {y}?\n{shown}"
    content = f"{x} + {y} = {right}, which is option {letter}.\nAnswer: {letter}"
    if rng.random() < 0.5:
        content = f"{x} + {y} = {right}.\n\\boxed{{{letter}}}"
    return [
        {"role": "user", "content": f"{question}\nAnswer with the letter of the correct option."},
        {"role": "assistant", "content": content},
    ]


def _debate(rng: random.Random) -> Messages:
    a, b = rng.randint(3, 90), rng.randint(3, 90)
    side = rng.choice(["affirmative", "negative"])
    return [
        {"role": "system", "content": f"You are the {side} debater. Argue for your answer."},
        {"role": "user", "content": f"Topic: is {a} + {b} equal to {a + b}? State your view."},
        {
            "role": "assistant",
            "content": f"{a} + {b} = {a + b}, so the claim holds. \\boxed{{{a + b}}}",
        },
    ]


_GENERATORS: tuple[tuple[Callable[[random.Random], Messages], int], ...] = (
    (_tic_tac_toe, 3),
    (_connect_four, 1),
    (_poker, 3),
    (_hanabi, 3),
    (_word_problem, 3),
    (_multiple_choice, 2),
    (_debate, 1),
)


def sample_conversation(rng: random.Random) -> Messages:
    """One synthetic conversation, drawn with the generators' fixed weights."""
    generators = [g for g, _ in _GENERATORS]
    weights = [w for _, w in _GENERATORS]
    return rng.choices(generators, weights=weights, k=1)[0](rng)


def synthetic_conversations(seed: int, count: int) -> list[Messages]:
    rng = random.Random(seed)
    return [sample_conversation(rng) for _ in range(count)]


def synthetic_documents(seed: int, count: int) -> list[str]:
    """Chat-rendered conversations, each closed with `<|endoftext|>` like a pre-training stream."""
    return [render_chat(c) + END_OF_TEXT for c in synthetic_conversations(seed, count)]
