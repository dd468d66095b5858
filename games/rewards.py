"""Turn rewards and episode outcomes (the numbers are documented in docs/games.md; the switches
between this project's choices and the MARSHAL code's are in games.rules and docs/parity.md).

Per turn and seat:
- +format_bonus (0.05) for a reply that parsed to a legal action (bots: every move);
- minus a length penalty for model replies over `length_threshold` completion tokens;
- the game's payoff: with turn_rewards="outcome" the seat's OpenSpiel return (or `draw_reward`,
  0.1, for a drawn board game) on its last turn; with "step" OpenSpiel's reward of every step,
  paid on the acting seat's turn and on the other seat's latest turn (`pay_step`);
- an invalid move (after any re-asks) ends the game: the offender's last turn gets a penalty
  (`forfeit`: -1-10 board, -own bet-10 poker, -score-10 Hanabi).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyspiel

from games.episode import EpisodeResult, Outcome, Turn
from games.rules import InvalidOutcome, LengthPenaltyStyle
from games.spec import GameSpec, RewardRules

# The MARSHAL code's length penalty (roll/agentic/rollout/env_manager.py, compute_length_penalty):
# 0.5 x (1 - (L - 11) / (2048 - 11)) when negative, i.e. -0.5 per 2,037 tokens over 2,048.
REFERENCE_LENGTH_MIN = 11
REFERENCE_LENGTH_MAX = 2048
REFERENCE_LENGTH_SCALE = 0.5


def length_penalty(
    rules: RewardRules, completion_tokens: int, style: LengthPenaltyStyle = "light"
) -> float:
    if style == "reference":
        span = REFERENCE_LENGTH_MAX - REFERENCE_LENGTH_MIN
        over = completion_tokens - REFERENCE_LENGTH_MAX
        return REFERENCE_LENGTH_SCALE * over / span if over > 0 else 0.0
    over = completion_tokens - rules.length_threshold
    if over <= 0:
        return 0.0
    return min(rules.length_penalty_cap, over * rules.length_penalty_per_token)


@dataclass(frozen=True)
class Forfeit:
    returns: list[float]  # the episode's returns per seat (what the arena scores)
    penalty: float  # added to the offender's last turn
    partner_reward: float = 0.0  # added to the other seat's last turn


def forfeit(
    spec: GameSpec,
    state: pyspiel.State,
    offender: int,
    outcome: InvalidOutcome = "forfeit",
    *,
    steps_paid: bool = False,
) -> Forfeit:
    """What an invalid move by `offender` costs, under `outcome` (games.rules).

    steps_paid: the per-step rewards were already paid (turn_rewards="step"), so in Hanabi the
    seats hold the score so far in their turn rewards.
    """
    rules = spec.rewards
    extra = rules.invalid_extra
    other = 1 - offender
    returns = [0.0, 0.0]
    if rules.penalty_kind == "score":
        score = float(state.returns()[offender])
        if outcome == "forfeit":  # the score is lost for both seats
            return Forfeit(returns, -score - extra)
        returns = [score, score]
        if steps_paid:  # both hold the score already: the offender's total becomes -extra
            return Forfeit(returns, -score - extra)
        return Forfeit(returns, -extra, partner_reward=score)
    if rules.penalty_kind == "bet":
        if spec.own_bet is None:
            raise ValueError(f"{spec.name}: a 'bet' penalty needs own_bet")
        lost = spec.own_bet(state, offender)
    else:
        lost = 1.0
    returns[offender] = -lost
    if outcome == "reference":  # the other seat wins what the offender loses
        returns[other] = lost
    return Forfeit(returns, -lost - extra)


def outcome_labels(spec: GameSpec, returns: list[float]) -> list[Outcome]:
    if spec.cooperative:  # a shared score: only a perfect game counts as a win
        best = spec.max_return
        return ["win" if r >= best else "loss" for r in returns]
    return ["win" if r > 0 else "loss" if r < 0 else "draw" for r in returns]


def turn_reward(
    rules: RewardRules,
    legal: bool,
    completion_tokens: int | None,
    style: LengthPenaltyStyle = "light",
) -> float:
    """A turn's own reward before the outcome: format bonus minus any length penalty."""
    reward = rules.format_bonus if legal else 0.0
    if completion_tokens is not None:
        reward -= length_penalty(rules, completion_tokens, style)
    return reward


def pay_step(spec: GameSpec, state: pyspiel.State, seat: int, latest: list[Turn | None]) -> None:
    """Pay OpenSpiel's rewards of the step `seat` just made (turn_rewards="step").

    The acting seat's turn `latest[seat]` gets its reward; the other seat's latest turn gets the
    other's (a seat that has not moved yet gets nothing, as in the code).
    """
    rewards = state.rewards()
    zero = spec.rewards.step_terminal_zero
    if zero is not None and state.is_terminal():
        rewards = [zero if value == 0 else value for value in rewards]
    for receiver, value in enumerate(rewards):
        turn = latest[receiver]
        if turn is not None and value:
            turn["reward"] += value


def assign_rewards(
    spec: GameSpec,
    result: EpisodeResult,
    *,
    forfeited: Forfeit | None = None,
    outcome_paid: bool = False,
) -> None:
    """Add the outcome (or the forfeit) to each seat's last turn and total the rewards per seat.

    Every turn must already hold its own `turn_reward` (and, when `outcome_paid`, its step
    rewards); `result.returns` must be final.
    """
    seats = len(result.returns)
    sums = [0.0] * seats
    last: list[Turn | None] = [None] * seats
    for turn in result.turns:
        seat = turn["seat"]
        sums[seat] += turn["reward"]
        last[seat] = turn
    for seat, turn in enumerate(last):
        if turn is None:
            continue
        if result.invalid_seat is None:
            if outcome_paid:
                continue
            extra = outcome_reward(spec.rewards, result, seat)
        else:
            assert forfeited is not None, "an invalid episode needs its forfeit"
            extra = forfeited.penalty if seat == result.invalid_seat else forfeited.partner_reward
            if not extra:
                continue
        turn["reward"] += extra
        sums[seat] += extra
    result.rewards = sums


def outcome_reward(rules: RewardRules, result: EpisodeResult, seat: int) -> float:
    value = result.returns[seat]
    if value == 0 and rules.draw_reward is not None and not result.truncated:
        return rules.draw_reward
    return value
