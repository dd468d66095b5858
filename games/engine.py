"""The episode engine: plays one game between two seats and returns a typed `EpisodeResult`.

Classic bots are asked synchronously and never see a prompt, so an all-bot episode runs close to
a raw OpenSpiel loop (a coroutine that never suspends). Model seats get their prompts rendered
lazily (`SeatPrompter`) and are awaited; a model call that fails for good (EndpointError) stops the
episode with `error` set, so the arena can redo it later.
"""

from __future__ import annotations

import _random
import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyspiel

from core.errors import MarsError
from games.actions import vocabulary
from games.chance import ChanceSampler, DealTable, deal_table, stream
from games.episode import EpisodeResult, Turn, bot_move
from games.parsing import parse_move
from games.players.base import ModelAgent, Player
from games.prompts import PROMPT_STYLES, PromptStyle, SeatPrompter
from games.rewards import (
    assign_rewards,
    forfeit,
    outcome_labels,
    outcome_reward,
    pay_step,
    turn_reward,
)
from games.rules import DEFAULT_RULES, PlayRules
from games.spec import GameSpec, RewardRules


def retries_allowed(invalid: str) -> int:
    """0 for "penalty"; K for "retry:K" (re-ask up to K times, then the penalty)."""
    text = invalid.strip().lower()
    if text == "penalty":
        return 0
    name, _, count = text.partition(":")
    if name == "retry" and count.isdigit() and int(count) > 0:
        return int(count)
    raise MarsError(f"--invalid must be 'penalty' or 'retry:K' with K >= 1, not {invalid!r}")


@dataclass(frozen=True)
class EpisodeOptions:
    prompt_style: PromptStyle = "full"
    invalid: str = "penalty"  # "penalty" (the game ends at once) or "retry:K"
    rules: PlayRules = DEFAULT_RULES  # dealing, parsing and scoring switches (games.rules)

    def __post_init__(self) -> None:
        if self.prompt_style not in PROMPT_STYLES:
            raise MarsError(f"--prompt-style must be one of {', '.join(PROMPT_STYLES)}")
        retries_allowed(self.invalid)

    @property
    def retries(self) -> int:
        return retries_allowed(self.invalid)


DEFAULT_OPTIONS = EpisodeOptions()


class _ModelSeat:
    """A model seat: its agent and the prompter that keeps its chat."""

    __slots__ = ("agent", "prompter")

    def __init__(self, agent: ModelAgent, prompter: SeatPrompter) -> None:
        self.agent = agent
        self.prompter = prompter


async def play_episode(
    spec: GameSpec,
    players: Sequence[Player],
    seed: int,
    options: EpisodeOptions = DEFAULT_OPTIONS,
) -> EpisodeResult:
    rules = options.rules
    deals = deal_table(spec, rules.leduc_deals)
    if plays_synchronously(players, options):
        return play_bot_episode(spec, players, seed, deals)
    pay_steps = rules.turn_rewards == "step"
    game = spec.game
    labels = vocabulary(spec).labels
    max_actions = spec.rewards.max_actions
    bonus = spec.rewards.format_bonus  # a bot's move is always legal
    # Per seat: the bot's `choose` (no prompt ever rendered) or the model seat. Both seats'
    # players share the episode's player stream (play is sequential, so it is still
    # deterministic per seed); chance has its own stream.
    player_rng = stream(seed, 1)
    bots: list[Callable[[pyspiel.State], int] | None] = []
    models: list[_ModelSeat | None] = []
    retries = options.retries
    for seat, player in enumerate(players):
        agent = player.agent(seat=seat, rng=player_rng, seed=seed)
        if player.is_model:
            prompter = SeatPrompter(spec, seat, options.prompt_style, retries)
            models.append(_ModelSeat(agent, prompter))  # type: ignore[arg-type]
            bots.append(None)
        else:
            bots.append(agent.choose)  # type: ignore[union-attr]
            models.append(None)

    result = EpisodeResult(
        spec.name, seed, tuple([p.name for p in players]), variant_of=spec.variant_of
    )
    turns = result.turns
    history: list[tuple[int, str]] = []  # (seat, label) of every move, for model prompts
    turn_counts = [0] * len(players)
    latest: list[Turn | None] = [None] * len(players)  # each seat's latest turn (step rewards)
    chance: ChanceSampler | None = None
    state = game.new_initial_state()
    steps = 0
    while not state.is_terminal():
        if state.is_chance_node():
            if chance is None:
                chance = ChanceSampler(spec, seed, deals)
            state.apply_action(chance.sample(state))
            continue
        if steps >= max_actions:
            result.truncated = True
            break
        seat = state.current_player()
        choose = bots[seat]
        if choose is not None:
            action = choose(state)
            turn = turn_counts[seat]
            turn_counts[seat] = turn + 1
            label = labels[seat][action]
            turns.append(
                {"seat": seat, "turn": turn, "action": label, "legal": True, "reward": bonus}
            )
        else:
            # Imported here: only games with a model seat pay for loading the openai client.
            from core.endpoint import EndpointError

            model = models[seat]
            assert model is not None
            try:
                action = await _model_turn(
                    spec, state, seat, model, history, turn_counts, steps, turns, retries, rules
                )
            except EndpointError as exc:
                result.error = f"seat {seat}: {exc}"
                break
            if action is None:
                result.invalid_seat = seat
                break
            label = labels[seat][action]
        history.append((seat, label))
        state.apply_action(action)
        steps += 1
        if pay_steps:
            latest[seat] = turns[-1]
            pay_step(spec, state, seat, latest)
    result.num_actions = steps
    _finish(spec, state, result, rules)
    return result


def play_bot_episode(
    spec: GameSpec, players: Sequence[Player], seed: int, deals: DealTable | None = None
) -> EpisodeResult:
    """One episode between classic bots only: synchronous, close to a bare OpenSpiel loop.

    The same result as the general path. The turns are shared `BotMove`s (games.episode): a bot
    arena repeats the same few hundred moves, so none is built or encoded twice.
    """
    rng = _player_stream(seed)  # shared by both seats, as in the general path
    chooses = [
        player.agent(seat=seat, rng=rng, seed=seed).choose  # type: ignore[union-attr]
        for seat, player in enumerate(players)
    ]
    moves = _moves_paying_bonus(spec)
    labels = vocabulary(spec).labels
    rules = spec.rewards
    bonus, max_actions = rules.format_bonus, rules.max_actions
    result = EpisodeResult(
        spec.name, seed, tuple([p.name for p in players]), variant_of=spec.variant_of
    )
    turns = result.turns
    append = turns.append
    seats = len(players)
    counts = [0] * seats
    last = [-1] * seats  # where each seat's latest move is in `turns`
    state = spec.game.new_initial_state()
    is_terminal, current_player, apply_action = (
        state.is_terminal,
        state.current_player,
        state.apply_action,
    )
    is_chance_node = state.is_chance_node if spec.has_chance else None
    chance: ChanceSampler | None = None
    steps = 0
    while not is_terminal():
        if is_chance_node is not None and is_chance_node():
            if chance is None:
                chance = ChanceSampler(spec, seed, deals)
            apply_action(chance.sample(state))
            continue
        if steps >= max_actions:
            result.truncated = True
            break
        seat = current_player()
        action = chooses[seat](state)
        count = counts[seat]
        counts[seat] = count + 1
        last[seat] = steps
        key = (seat, count, action)
        turn = moves.get(key)
        if turn is None:
            turn = moves[key] = bot_move(seat, count, labels[seat][action], bonus)
        append(turn)
        apply_action(action)
        steps += 1
    result.num_actions = steps
    result.returns = returns = state.returns()
    result.outcomes = outcome_labels(spec, returns)
    result.rewards = [
        _pay_outcome(rules, result, seat, counts[seat], last[seat]) for seat in range(seats)
    ]
    return result


def _pay_outcome(
    rules: RewardRules, result: EpisodeResult, seat: int, count: int, last: int
) -> float:
    """The seat's reward: its moves' bonuses, then its outcome, added in the general path's
    order (so the float is the same); the outcome goes on its last move (another shared move)."""
    total = 0.0
    bonus = rules.format_bonus
    for _ in range(count):
        total += bonus
    if last < 0:
        return total
    extra = outcome_reward(rules, result, seat)
    turn = result.turns[last]
    result.turns[last] = bot_move(seat, count - 1, turn["action"], turn["reward"] + extra)
    return total + extra


@functools.cache
def _moves_paying_bonus(spec: GameSpec) -> dict[tuple[int, int, int], Turn]:
    """(seat, turn, action id) -> the shared move paying the spec's format bonus, filled as
    played (bounded by the game: a seat's turns times its actions). Looked up by plain ints, it
    spares each move `bot_move`'s exact key."""
    return {}


def bots_only(players: Sequence[Player]) -> bool:
    """Whether no seat is a model."""
    return all(not player.is_model for player in players)


def plays_synchronously(players: Sequence[Player], options: EpisodeOptions) -> bool:
    """Whether `play_bot_episode` plays this episode: bots only, paid on the outcome (a step
    reward needs the general path's per-step pay)."""
    return bots_only(players) and options.rules.turn_rewards != "step"


class _SeededRandom(random.Random):
    """`random.Random(n)` for an int n: the same state, without the Python-level `seed` wrapper
    (for an int it only calls the C seeder), which is a tenth of a bot episode's cost."""

    def __init__(self, n: int) -> None:
        _random.Random.seed(self, n)
        self.gauss_next = None


def _player_stream(seed: int) -> random.Random:
    """The same generator as `games.chance.stream(seed, 1)`, built faster (tests check this)."""
    return _SeededRandom(seed * 8 + 1)


async def _model_turn(
    spec: GameSpec,
    state: pyspiel.State,
    seat: int,
    model: _ModelSeat,
    history: list[tuple[int, str]],
    turn_counts: list[int],
    steps: int,
    turns: list[Turn],
    retries: int,
    rules: PlayRules,
) -> int | None:
    """Ask the model (re-asking up to `retries` times); the action played, or None if invalid."""
    vocab = vocabulary(spec)
    legal_labels = vocab.legal_labels(state, seat)
    messages, reused = model.prompter.turn_messages(state, legal_labels, history)
    for attempt in range(retries + 1):
        completion = await model.agent.respond(messages)
        move = parse_move(
            completion.text, legal_labels, rules.parse_mode, numbered=model.prompter.numbered
        )
        usage = completion.usage
        turn: Turn = {
            "seat": seat,
            "turn": turn_counts[seat],
            "action": move.label,
            "legal": move.ok,
            "reward": turn_reward(
                spec.rewards, move.ok, usage.completion_tokens, rules.length_penalty
            ),
            "step": steps,
            "prompt": messages[reused:],
            "context_len": reused,
            "reply": completion.text,
            "reasoning": completion.reasoning,
            "finish_reason": completion.finish_reason,
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
            },
            "attempt": attempt,
            "error": move.error,
            "retried": False,
            "messages": messages,
        }
        turns.append(turn)
        turn_counts[seat] += 1
        if move.label is not None:
            model.prompter.accept_reply(completion.text)
            return vocab.action(seat, move.label)
        if attempt < retries:
            turn["retried"] = True
            messages, reused = model.prompter.retry_messages(
                messages, completion.text, move.error or "invalid reply", legal_labels
            )
    return None


def _finish(spec: GameSpec, state: pyspiel.State, result: EpisodeResult, rules: PlayRules) -> None:
    seats = len(result.players)
    calls, invalid, tokens = [0] * seats, [0] * seats, [0] * seats
    for turn in result.turns:
        if "usage" in turn:
            seat = turn["seat"]
            calls[seat] += 1
            invalid[seat] += not turn["legal"]
            tokens[seat] += turn["usage"]["completion_tokens"]
    result.model_turns, result.invalid_turns, result.completion_tokens = calls, invalid, tokens
    if result.error is not None:
        return
    steps_paid = rules.turn_rewards == "step"
    forfeited = None
    if result.invalid_seat is not None:
        forfeited = forfeit(
            spec, state, result.invalid_seat, rules.invalid_outcome, steps_paid=steps_paid
        )
        result.returns = forfeited.returns
    else:
        result.returns = state.returns()
    result.outcomes = outcome_labels(spec, result.returns)
    assign_rewards(spec, result, forfeited=forfeited, outcome_paid=steps_paid)
