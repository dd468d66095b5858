"""Turn rewards and episode outcomes (the numbers are documented in docs/games.md).

Per turn and seat:
- +format_bonus (0.05) for a reply that parsed to a legal action (bots: every move);
- minus a light length penalty for model replies over `length_threshold` completion tokens;
- on the seat's last turn, the game outcome: its OpenSpiel return, or `draw_reward` (0.1) for a
  drawn board game;
- an invalid move (after any re-asks) ends the game: the offender's last turn gets
  forfeit - invalid_extra instead (-1-10 board, -own bet-10 poker, -score-10 Hanabi) and the
  other seat gets nothing more for that step.
"""

from __future__ import annotations

import pyspiel

from games.episode import EpisodeResult, Outcome, Turn
from games.spec import GameSpec, RewardRules


def length_penalty(rules: RewardRules, completion_tokens: int) -> float:
    over = completion_tokens - rules.length_threshold
    if over <= 0:
        return 0.0
    return min(rules.length_penalty_cap, over * rules.length_penalty_per_token)


def forfeit(spec: GameSpec, state: pyspiel.State, offender: int) -> tuple[list[float], float]:
    """Returns per seat after `offender` forfeits, and the offender's penalty reward."""
    rules = spec.rewards
    returns = [0.0, 0.0]
    if rules.penalty_kind == "board":
        lost = 1.0
        returns[offender] = -lost
    elif rules.penalty_kind == "bet":
        if spec.own_bet is None:
            raise ValueError(f"{spec.name}: a 'bet' penalty needs own_bet")
        lost = spec.own_bet(state, offender)
        returns[offender] = -lost
    else:  # "score": the team's score so far is lost, for both seats
        lost = float(state.returns()[offender])
    return returns, -lost - rules.invalid_extra


def outcome_labels(spec: GameSpec, returns: list[float]) -> list[Outcome]:
    if spec.cooperative:  # a shared score: only a perfect game counts as a win
        best = spec.max_return
        return ["win" if r >= best else "loss" for r in returns]
    return ["win" if r > 0 else "loss" if r < 0 else "draw" for r in returns]


def turn_reward(rules: RewardRules, legal: bool, completion_tokens: int | None) -> float:
    """A turn's own reward before the outcome: format bonus minus any length penalty."""
    reward = rules.format_bonus if legal else 0.0
    if completion_tokens is not None:
        reward -= length_penalty(rules, completion_tokens)
    return reward


def assign_rewards(
    spec: GameSpec, result: EpisodeResult, *, invalid_penalty: float | None = None
) -> None:
    """Add the outcome (or the penalty) to each seat's last turn and total the rewards per seat.

    Every turn must already hold its own `turn_reward`; `result.returns` must be final.
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
            extra = outcome_reward(spec.rewards, result, seat)
        elif seat == result.invalid_seat:
            assert invalid_penalty is not None, "an invalid episode needs its penalty"
            extra = invalid_penalty
        else:
            continue  # the other seat gets nothing for the offender's step
        turn["reward"] += extra
        sums[seat] += extra
    result.rewards = sums


def outcome_reward(rules: RewardRules, result: EpisodeResult, seat: int) -> float:
    value = result.returns[seat]
    if value == 0 and rules.draw_reward is not None and not result.truncated:
        return rules.draw_reward
    return value
