"""Synthetic transcripts of legal play, for teaching a small model the reply format.

Positions come from whole games played by classic bots ("teachers": `random`, `mcts:SIMS` in
perfect-information games, `cfr:ITERS` in poker). At every decision the seat to move gets the very
prompt a model seat would get (`games.prompts.SeatPrompter`, `compact` or `full`), and the target
reply is a short phrase, then the answer tag:

    I choose <X(2,2)>.
    <answer><X(2,2)></answer>

No `<think>` block: a ~1M model often fails to close one, and a server then files the whole reply
under reasoning, leaving no answer.

Which move the reply names. In poker and Hanabi the teacher's move: some actions are legal in
every position there, and a small model learns a legal reply from teacher moves within a few dozen
steps. In perfect-information games (the legal list changes every turn) the reply can name the
last action of the legal list instead (`last_listed_share`): that label always sits at the same
distance before the end of the prompt, which a ~1M model learns to copy within ~150 steps, while
with random or MCTS targets it settles on "always the centre/corner" at 60-70% legal moves and
reads the list only after several times as many steps (measured on Tic-Tac-Toe, greedy replies).
The teachers still choose the positions (and, in the `compact` style, the moves actually played),
so the positions are as varied as random and MCTS play makes them. A recipe's `reply_teachers`
replace both rules in the games they name: the reply names a move drawn from a strong policy at
a chosen level (`teacher_replies`), so the start's play varies and leans towards good moves.

Everything is drawn from seeded RNGs: a seed fixes the positions exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyspiel

from core.errors import MarsError
from games.actions import vocabulary
from games.chance import ChanceSampler
from games.players import PlayerContext, make_player
from games.players.base import BotAgent, Player
from games.prompts import PROMPT_STYLES, SeatPrompter
from games.spec import GameSpec
from harness.benchmarks.prompts import choice_prompt, math_prompt
from train_backend.pretrain.teacher_replies import ReplySampler

Message = dict[str, str]
# Bump when the text of positions or replies changes (cached pre-trained models are rebuilt).
FORMAT_DATA_VERSION = 1
MCTS_TEACHER = "mcts:50"
CFR_TEACHER = "cfr:300"


@dataclass(frozen=True)
class Example:
    """One supervised example: the chat sent to the model and the reply it should give."""

    kind: str  # a game name, or "arithmetic"
    style: str  # "compact" | "full" for games; "boxed" for arithmetic
    messages: tuple[Message, ...]
    reply: str
    legal: tuple[str, ...] = ()  # the legal labels at this position (games)
    answer: str = ""  # the expected answer text (arithmetic)
    move: str = ""  # the legal label the reply names (games)


def game_reply(label: str, note: str = "", legal: Sequence[str] | None = None) -> str:
    """The target reply: `I choose X.` then the answer tag, or the state restated then the tag.

    With a note the move is named once: two copies of it are two sampled decisions that can
    disagree, and self-play credits both for what only the answer tag decided. With the
    `numbered` style's `legal` list the answer is the move's number in it, and nothing else
    names the move.
    """
    if legal is not None:
        number = legal.index(label) + 1
        return f"{note}\n<answer>{number}</answer>" if note else f"<answer>{number}</answer>"
    if note:
        return f"{note}\n<answer>{label}</answer>"
    return f"I choose {label}.\n<answer>{label}</answer>"


def _reply_for(example_style: str, label: str, note: str, legal: Sequence[str]) -> str:
    return game_reply(label, note, legal if example_style == "numbered" else None)


def state_note(spec: GameSpec, state: pyspiel.State, seat: int) -> str:
    """The seat's compact view of the state on one line, as a reply restates it before choosing.

    A ~1M model attends to nearby tokens more readily than to a card or a hint dozens of tokens
    back in the prompt; with the state restated, the move token sits right after what decides it.
    """
    return "; ".join(line.strip() for line in spec.view(state, seat).compact.splitlines())


def teachers_for(spec: GameSpec) -> list[str]:
    """Bots whose moves make the positions: always random, plus a strong bot where one exists."""
    if spec.perfect_information:
        return ["random", MCTS_TEACHER]
    if spec.deal_radices:  # the poker games: a solved tree exists
        return ["random", CFR_TEACHER]
    return ["random"]


def build_teachers(spec: GameSpec, names: Sequence[str]) -> list[Player]:
    context = PlayerContext(spec=spec)
    return [make_player(name, context) for name in names]


def reply_teacher_for(spec: GameSpec, name: str | None) -> Player | None:
    """The bot whose moves the replies name in `spec`, when it can play it (`minimax` solves
    Tic-Tac-Toe but refuses Connect Four and the imperfect-information games)."""
    if name is None or not spec.perfect_information:
        return None
    try:
        return make_player(name, PlayerContext(spec=spec))
    except MarsError:
        return None


@dataclass(frozen=True)
class _Unnamed:
    """A compact position whose reply a sampler names once the position is kept."""

    state: pyspiel.State
    seat: int
    note: str


def _episode_positions(
    spec: GameSpec,
    style: str,
    teachers: Sequence[Player],
    episode_seed: int,
    last_listed_share: float,
    max_seat_turns: int | None = None,
    reply_teacher: Player | None = None,
    restate: bool = False,
    reply_sampler: ReplySampler | None = None,
) -> Iterator[tuple[Example, _Unnamed | None]]:
    """Every decision of one game between two teachers, as the mover's prompt and reply.

    The reply names a move `reply_sampler` draws when one is given; else the last action of the
    legal list with probability `last_listed_share`, else the move of `reply_teacher` when one
    is given, else the moving teacher's move. In the `compact` style every prompt stands alone,
    so the game keeps following the teachers (varied positions), and a sampler's move is drawn
    later, for the positions kept only (`_Unnamed`: an MCTS search each); in the `full` style
    the seat's own earlier replies stay in its chat, so the move named is the move played.
    """
    rng = random.Random(episode_seed)
    draws = random.Random(f"reply-{episode_seed}")  # the sampler's: the game's rng untouched
    seat_players = [teachers[rng.randrange(len(teachers))] for _ in range(2)]
    agents = [seat_players[seat].agent(seat=seat, rng=rng, seed=episode_seed) for seat in range(2)]
    namers = (
        agents
        if reply_teacher is None
        else [reply_teacher.agent(seat=seat, rng=rng, seed=episode_seed) for seat in range(2)]
    )
    prompters = [SeatPrompter(spec, seat, style) for seat in range(2)]  # type: ignore[arg-type]
    vocab = vocabulary(spec)
    chance = ChanceSampler(spec, episode_seed)
    history: list[tuple[int, str]] = []
    turns = [0, 0]
    state = spec.game.new_initial_state()
    while not state.is_terminal() and len(history) < spec.rewards.max_actions:
        if max_seat_turns is not None and min(turns) >= max_seat_turns:
            return
        if state.is_chance_node():
            state.apply_action(chance.sample(state))
            continue
        seat = state.current_player()
        legal = vocab.legal_labels(state, seat)
        messages, _ = prompters[seat].turn_messages(state, legal, history)
        agent = agents[seat]
        assert isinstance(agent, BotAgent)
        action = agent.choose(state)
        note = state_note(spec, state, seat) if restate else ""
        unnamed = None
        if reply_sampler is not None and style != "full":
            label, unnamed = "", _Unnamed(state.clone(), seat, note)
        elif reply_sampler is not None:
            label = vocab.label(seat, reply_sampler.sample(state, draws))
        elif rng.random() < last_listed_share:
            label = legal[-1]
        else:
            namer = namers[seat]
            assert isinstance(namer, BotAgent)
            label = vocab.label(seat, action if namer is agent else namer.choose(state))
        if style == "full":
            action = vocab.action(seat, label)  # type: ignore[assignment]
        reply = _reply_for(style, label, note, legal) if label else ""  # unnamed: see _named
        if max_seat_turns is None or turns[seat] < max_seat_turns:
            example = Example(spec.name, style, tuple(messages), reply, tuple(legal), move=label)
            yield example, unnamed
        turns[seat] += 1
        prompters[seat].accept_reply(reply)
        history.append((seat, vocab.label(seat, action)))
        state.apply_action(action)


def _named(
    example: Example, unnamed: _Unnamed, sampler: ReplySampler, spec: GameSpec, rng: random.Random
) -> Example:
    label = vocabulary(spec).label(unnamed.seat, sampler.sample(unnamed.state, rng))
    reply = _reply_for(example.style, label, unnamed.note, example.legal)
    return replace(example, reply=reply, move=label)


def game_examples(
    spec: GameSpec,
    style: str,
    *,
    count: int,
    first_seed: int,
    teachers: Sequence[Player],
    per_episode: int | None = None,
    last_listed_share: float = 0.0,
    balance: int = 1,
    max_seat_turns: int | None = None,
    reply_teacher: Player | None = None,
    restate: bool = False,
    reply_sampler: ReplySampler | None = None,
) -> list[Example]:
    """`count` positions from games with seeds first_seed, first_seed + 1, ...

    `per_episode` keeps at most that many positions of each game (a random subset, in order), so
    a small sample still spans many games rather than a few long ones; `max_seat_turns` keeps
    only each seat's first turns (the shortest `full` prompts). With `balance` > 1, a pool
    of `balance * count` positions is drawn and the examples are taken from it evenly over the
    move the reply names (round robin over the moves), so that no single move is right by
    default: otherwise the last listed move in Tic-Tac-Toe is the corner <X(2,2)> in about two
    positions of three, and a small model settles on always answering it instead of reading the
    legal list. `reply_sampler`: the replies name its draws (see `_episode_positions`).
    """
    if style not in PROMPT_STYLES:
        raise MarsError(f"unknown prompt style {style!r}; choose from {', '.join(PROMPT_STYLES)}")
    pool: list[Example] = []
    episode_seed = first_seed
    wanted = count * max(1, balance)
    while len(pool) < wanted:
        positions = list(
            _episode_positions(
                spec,
                style,
                teachers,
                episode_seed,
                last_listed_share,
                max_seat_turns=max_seat_turns,
                reply_teacher=reply_teacher,
                restate=restate,
                reply_sampler=reply_sampler,
            )
        )
        if per_episode is not None and len(positions) > per_episode:
            keep = sorted(random.Random(episode_seed).sample(range(len(positions)), per_episode))
            positions = [positions[i] for i in keep]
        draws = random.Random(f"kept-{episode_seed}")
        for example, unnamed in positions[: wanted - len(pool)]:
            if unnamed is not None:
                assert reply_sampler is not None
                example = _named(example, unnamed, reply_sampler, spec, draws)
            pool.append(example)
        episode_seed += 1
    if balance <= 1:
        return pool
    return _even_over_moves(pool, count)


def _even_over_moves(pool: list[Example], count: int) -> list[Example]:
    by_move: dict[str, list[Example]] = {}
    for example in pool:
        by_move.setdefault(example.move, []).append(example)
    queues = [list(reversed(group)) for _, group in sorted(by_move.items())]
    out: list[Example] = []
    while len(out) < count:
        for queue in queues:
            if queue and len(out) < count:
                out.append(queue.pop())
    return out


_NAMES = ("Ana", "Bo", "Cyd", "Dev", "Eun", "Femi", "Gus", "Ines", "Jon", "Kai")
_THINGS = ("pens", "eggs", "shells", "coins", "plums", "cards", "seeds", "beads")


def arithmetic_example(rng: random.Random) -> Example:
    """A one-step word problem or a lettered-option sum, answered in `\\boxed{}`."""
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, b = rng.randint(2, 50), rng.randint(2, 30)
    if rng.random() < 0.25:
        total = a + b
        options = [total, total + rng.randint(1, 6), max(0, total - rng.randint(1, 6)), a * b]
        options = list(dict.fromkeys(options))
        rng.shuffle(options)
        letter = "ABCDEFGHIJ"[options.index(total)]
        prompt = choice_prompt(f"What is {a} + {b}?", [str(v) for v in options])
        reply = f"{a} + {b} = {total}.\n\\boxed{{{letter}}}"
        return Example(
            "arithmetic", "boxed", ({"role": "user", "content": prompt},), reply, answer=letter
        )
    operation = rng.randrange(3)
    if operation == 0:
        question = f"{name} has {a} {thing} and gets {b} more. How many {thing} now?"
        work, answer = f"{a} + {b} = {a + b}", a + b
    elif operation == 1:
        a, b = max(a, b), min(a, b)
        question = f"{name} has {a} {thing} and gives {b} away. How many {thing} are left?"
        work, answer = f"{a} - {b} = {a - b}", a - b
    else:
        a, b = a % 9 + 2, b % 9 + 2
        question = f"{name} has {a} bags with {b} {thing} in each. How many {thing} in all?"
        work, answer = f"{a} * {b} = {a * b}", a * b
    prompt = math_prompt(question)
    return Example(
        "arithmetic",
        "boxed",
        ({"role": "user", "content": prompt},),
        f"{work}.\n\\boxed{{{answer}}}",
        answer=str(answer),
    )


def arithmetic_examples(count: int, seed: int) -> list[Example]:
    rng = random.Random(seed)
    return [arithmetic_example(rng) for _ in range(count)]
