"""Tree-sampled rollouts (`at_grpo`): groups, branch returns, all-actions branches, continuation.

A scripted generator stands in for the model (these tests are about the tree's plumbing): it
answers every Kuhn prompt with a fixed move (BET unless told otherwise), so each branch's
return can be recomputed independently with OpenSpiel from the deal and the moves.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from core.batcher import Generated, MicroBatcher, Request
from core.causal_lm import Policy, load_policy
from core.errors import MarsError
from core.tiny_model import ensure_tiny_model
from games.engine import EpisodeOptions
from games.players.base import BotAgent, Player
from games.prompts import legal_actions_in
from games.spec import get_game
from train_backend.advantage import compute_advantages
from train_backend.config import TreeSettings
from train_backend.local.rollout import PolicyResponder, StepRollout
from train_backend.local.tree import play_tree_step

KUHN = get_game("kuhn_poker")
BET, PASS = "<BET>", "<PASS>"
Chooser = Callable[[list[str], int], str]  # (legal labels, reply index) -> the label answered


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(ensure_tiny_model())


def scripted_responder(policy: Policy, choose: Chooser, numbered: bool = False) -> PolicyResponder:
    """A responder whose replies are a numbered note then `<answer>label</answer>`, the label
    the one `choose` picks (`numbered`: its number in the legal list)."""
    counter = {"n": 0}

    def generate(requests: list[Request]) -> list[Generated]:
        out = []
        for request in requests:
            legal = legal_actions_in(policy.decode(request.prompt_ids))
            label = choose(legal, counter["n"])
            counter["n"] += 1
            answer = legal.index(label) + 1 if numbered and label in legal else label
            reply = f"note {counter['n']}\n<answer>{answer}</answer>"  # each reply its own note
            ids = policy.tokenizer(reply, add_special_tokens=False)
            out.append(Generated([*ids["input_ids"], policy.stop_ids[0]], True))
        return out

    return PolicyResponder(
        policy,
        MicroBatcher(generate, max_batch=64),
        max_new_tokens=16,
        max_context_tokens=2048,
        keep_tokens=True,
    )


def always_bet(legal: list[str], index: int) -> str:
    return BET if BET in legal else legal[0]


def tree_step(
    policy: Policy,
    tree: TreeSettings,
    *,
    choose: Chooser = always_bet,
    games: int = 6,
    style: str = "compact",
) -> StepRollout:
    return asyncio.run(
        play_tree_step(
            scripted_responder(policy, choose, numbered=style == "numbered"),
            [KUHN],
            tree=tree,
            step=1,
            run_seed=0,
            games_per_step=games,
            options=EpisodeOptions(prompt_style=style),  # type: ignore[arg-type]
        )
    )


def groups_of(rollout: StepRollout) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = defaultdict(list)
    for index, row in enumerate(rollout.rows):
        groups[(row["game"], row["episode"], row["seat"], row["turn"])].append(index)
    return groups


def answer(rollout: StepRollout, policy: Policy, index: int) -> str:
    text = policy.decode(rollout.samples[index].completion_ids)
    return BET if BET in text else PASS


def kuhn_reward(deal: tuple[int, int], moves: list[int], seat: int) -> float:
    """`seat`'s reward from its move `moves[-1]` on: the Kuhn return after the deal and `moves`
    (0 pass, 1 bet) with both seats then always betting, plus the format bonus of each of its
    legal moves from that one on."""
    state = KUHN.game.new_initial_state()
    for card in deal:
        state.apply_action(card)
    for move in moves[:-1]:
        state.apply_action(move)
    own_moves = 0
    move = moves[-1]
    while not state.is_terminal():
        own_moves += state.current_player() == seat
        state.apply_action(move)
        move = 1
    return float(state.returns()[seat]) + own_moves * KUHN.rewards.format_bonus


def deal_of(record: dict[str, Any]) -> tuple[int, int]:
    """The two cards, read from each seat's first prompt ("card J")."""
    cards = {}
    for turn in record["turns"]:
        if "prompt" in turn and turn["seat"] not in cards:
            cards[turn["seat"]] = "JQK".index(re.search(r"card ([JQK])", str(turn["prompt"]))[1])
    return cards[0], cards[1]


def test_every_policy_turn_is_a_group_of_k_branches_from_one_state(policy: Policy) -> None:
    rollout = tree_step(policy, TreeSettings(branches=3))
    groups = groups_of(rollout)
    assert groups and len(rollout.records) == 6
    for indices in groups.values():
        assert len(indices) == 3
        rows = [rollout.rows[i] for i in indices]
        assert len({row["state"] for row in rows}) == 1
        assert sum(row["chosen"] for row in rows) == 1
        prompts = {tuple(rollout.samples[i].prompt_ids) for i in indices}
        assert len(prompts) == 1  # the K replies were sampled from one prompt
    # Main lines only in the records: one policy turn per model call of each record.
    main_turns = sum(sum(r["model_turns"]) for r in rollout.records)
    assert main_turns == len(groups)
    assert rollout.extra["tree_branches"] == 3 * len(groups)


def test_all_actions_puts_every_legal_move_among_the_branches(policy: Policy) -> None:
    plain = tree_step(policy, TreeSettings(branches=2))
    assert all(answer(plain, policy, i) == BET for i in range(len(plain.rows)))
    assert plain.extra["tree_flat_group_share"] == 1.0  # identical replies: nothing to compare

    covered = tree_step(policy, TreeSettings(branches=2, all_actions=True))
    for indices in groups_of(covered).values():
        assert sorted(answer(covered, policy, i) for i in indices) == [BET, PASS]
        forced = [covered.rows[i]["forced"] for i in indices]
        assert forced.count(True) == 1
    assert covered.extra["tree_forced_branches"] == len(groups_of(covered))


def test_all_actions_rewrites_numbered_answers_to_every_number(policy: Policy) -> None:
    """Numbered prompts: the forced branch answers the other move's number, and the game plays
    the move that number names (Kuhn lists <PASS> first, <BET> second)."""
    covered = tree_step(policy, TreeSettings(branches=2, all_actions=True), style="numbered")
    for indices in groups_of(covered).values():
        texts = [policy.decode(covered.samples[i].completion_ids) for i in indices]
        numbers = sorted(re.search(r"<answer>(\d)</answer>", t)[1] for t in texts)
        assert numbers == ["1", "2"]
        assert [covered.rows[i]["forced"] for i in indices].count(True) == 1
    assert covered.extra["tree_forced_branches"] == len(groups_of(covered))
    for record in covered.records:
        for turn in record["turns"]:
            if "reply" in turn:
                number = re.search(r"<answer>(\d)</answer>", turn["reply"])[1]
                assert turn["action"] == (PASS, BET)[int(number) - 1]


def garbage_first(legal: list[str], index: int) -> str:
    """Every other reply names no legal move; the others bet (or pass when betting is not legal)."""
    return "nonsense" if index % 2 == 0 else always_bet(legal, index)


@pytest.mark.parametrize("keep_invalid", [False, True])
def test_keep_invalid_leaves_invalid_samples_as_penalised_branches(
    policy: Policy, keep_invalid: bool
) -> None:
    """K = 2 in Kuhn (two legal moves): without `keep_invalid` all-actions rewrites every invalid
    sample into the missing move; with it the invalid sample stays, with its penalty."""
    tree = TreeSettings(branches=2, all_actions=True, keep_invalid=keep_invalid)
    rollout = tree_step(policy, tree, choose=garbage_first, games=8)
    invalid_samples = round(rollout.extra["tree_invalid_sample_rate"] * len(rollout.rows))
    invalid_rows = [row for row in rollout.rows if not row["legal"]]
    assert invalid_samples > 0
    if not keep_invalid:
        assert invalid_rows == []
        return
    assert len(invalid_rows) == invalid_samples
    for indices in groups_of(rollout).values():
        rows = [rollout.rows[i] for i in indices]
        legal = [row["reward"] for row in rows if row["legal"]]
        assert all(row["reward"] < min(legal) for row in rows if not row["legal"] and legal)


@pytest.mark.parametrize("branch_rate", [1.0, 0.5])
def test_a_branch_return_is_the_return_of_finishing_the_game_from_it(
    policy: Policy, branch_rate: float
) -> None:
    """Every branch's reward equals the seat's Kuhn return when its move is played after the main
    line's earlier moves and both seats then always bet (the scripted policy), also where earlier
    turns of the line were not branched."""
    tree = TreeSettings(branches=2, all_actions=True, branch_rate=branch_rate)
    rollout = tree_step(policy, tree, games=8)
    records = {r["seed"]: r for r in rollout.records}
    checked = 0
    for indices in groups_of(rollout).values():
        for index in indices:
            row = rollout.rows[index]
            record = records[row["episode"]]
            turns = record["turns"]
            moves = [int(t["action"] == BET) for t in turns]
            at = [i for i, t in enumerate(turns) if t["seat"] == row["seat"]][row["turn"]]
            mine = int(answer(rollout, policy, index) == BET)
            expected = kuhn_reward(deal_of(record), [*moves[:at], mine], row["seat"])
            assert row["reward"] == pytest.approx(expected), (row, moves)
            checked += 1
    assert checked == len(rollout.rows) > 0


def test_a_branch_rate_below_one_branches_some_turns_and_plays_the_rest_once(
    policy: Policy,
) -> None:
    tree = TreeSettings(branches=2, all_actions=True, branch_rate=0.5)
    rollout = tree_step(policy, tree, games=16)
    groups = groups_of(rollout)
    main_turns = sum(sum(r["model_turns"]) for r in rollout.records)
    assert len(rollout.records) == 16
    assert 0 < len(groups) < main_turns  # about half of the policy turns
    assert all(len(indices) == 2 for indices in groups.values())
    assert rollout.extra["tree_nodes"] == len(groups)
    again = groups_of(tree_step(policy, tree, games=16))
    assert sorted(again) == sorted(groups)  # which turns branch is a seeded draw


def test_greedy_continuation_follows_the_best_branch(policy: Policy) -> None:
    rollout = tree_step(policy, TreeSettings(branches=2, all_actions=True, continuation="greedy"))
    for indices in groups_of(rollout).values():
        rewards = [rollout.rows[i]["reward"] for i in indices]
        chosen = next(i for i in indices if rollout.rows[i]["chosen"])
        assert rollout.rows[chosen]["reward"] == max(rewards)


def test_a_tree_step_is_reproducible(policy: Policy) -> None:
    tree = TreeSettings(branches=2, all_actions=True)
    first, second = tree_step(policy, tree), tree_step(policy, tree)
    assert first.rows == second.rows
    assert [s.completion_ids for s in first.samples] == [s.completion_ids for s in second.samples]


def test_at_grpo_advantages_centre_each_tree_group(policy: Policy) -> None:
    rollout = tree_step(policy, TreeSettings(branches=2, all_actions=True), games=8)
    columns = ("episode", "game", "seat", "turn", "reward", "tokens", "legal")
    table = {c: [row[c] for row in rollout.rows] for c in columns}
    advantages = compute_advantages(table, "at_grpo")
    for indices in groups_of(rollout).values():
        values = advantages[indices]
        rewards = [rollout.rows[i]["reward"] for i in indices]
        assert abs(values.sum()) < 1e-6
        if len(set(rewards)) == 1:
            assert np.all(values == 0)
        else:  # the better move gets the positive advantage
            best = indices[int(np.argmax(rewards))]
            assert advantages[best] > 0


def test_counterfactual_branches_share_the_reply_and_differ_in_the_answer(policy: Policy) -> None:
    rollout = tree_step(policy, TreeSettings(branches=3, counterfactual=True))
    for indices in groups_of(rollout).values():
        assert len(indices) == 2  # one branch per legal move, not K
        texts = [policy.decode(rollout.samples[i].completion_ids) for i in indices]
        assert sorted(answer(rollout, policy, i) for i in indices) == [BET, PASS]
        notes = {t.rpartition("<answer>")[0] for t in texts}
        assert len(notes) == 1 and "note" in notes.pop()  # one sampled reply, two answers
        chosen = [rollout.rows[i] for i in indices if rollout.rows[i]["chosen"]]
        assert len(chosen) == 1 and not chosen[0]["forced"]  # the main line is the sample


def test_explored_moves_keep_returns_on_policy_and_drop_the_other_seats_turns(
    policy: Policy,
) -> None:
    """With `explore` = 1 the main line takes a uniformly chosen branch (here the forced PASS
    about half the time, which the always-bet policy never plays). The other seat's later turns
    in such a game are not trained, and every trained branch's return is still that of the
    always-bet policy finishing the game, also where the main line later explored."""
    rollout = tree_step(policy, TreeSettings(branches=2, all_actions=True, explore=1.0), games=12)
    records = {r["seed"]: r for r in rollout.records}
    explored_roots = [r for r in rollout.records if r["turns"][0]["action"] == PASS]
    assert explored_roots and rollout.extra["tree_explored_games"] >= len(explored_roots)
    assert rollout.extra["tree_off_policy_turns"] > 0
    trained = {(row["episode"], row["seat"]) for row in rollout.rows}
    for record in explored_roots:  # seat 0 explored at its first move: seat 1 is not trained
        assert (record["seed"], 1) not in trained and (record["seed"], 0) in trained
    for index, row in enumerate(rollout.rows):
        turns = records[row["episode"]]["turns"]
        moves = [int(t["action"] == BET) for t in turns]
        at = [i for i, t in enumerate(turns) if t["seat"] == row["seat"]][row["turn"]]
        mine = int(answer(rollout, policy, index) == BET)
        expected = kuhn_reward(deal_of(records[row["episode"]]), [*moves[:at], mine], row["seat"])
        assert row["reward"] == pytest.approx(expected), (row, moves)

    plain = tree_step(policy, TreeSettings(branches=2, all_actions=True), games=12)
    assert all(r["turns"][0]["action"] == BET for r in plain.records)
    assert plain.extra["tree_off_policy_turns"] == 0


def test_the_cpu_trainer_scales_tree_groups_by_their_state(tmp_path) -> None:
    """A real tree step of the CPU trainer with `scale: state_std`: every tree group is centred,
    and the advantages of each information state (rows sharing a prompt) have spread 1."""
    import torch

    from core.runstore import RunDir
    from train_backend.config import TrainConfig
    from train_backend.local.trainer import LocalTrainer

    torch.set_num_threads(1)
    config = TrainConfig.for_local(
        games=["kuhn_poker"],
        prompt_style="compact",
        estimator="at_grpo",
        estimator_options={"scale": "state_std"},
        tree={"branches": 2, "all_actions": True},
        games_per_step=6,
        max_new_tokens=16,
        eval_every=0,
    )
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    trainer = LocalTrainer(config, run, log=lambda _line: None)
    trainer.load()
    rollout = trainer.rollout(step=1)
    advantages = trainer.step_advantages(rollout)
    for indices in groups_of(rollout).values():
        assert abs(advantages[indices].sum()) < 1e-9
    by_state: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rollout.rows):
        by_state[row["state"]].append(index)
    spreads = [np.sqrt(np.mean(advantages[i] ** 2)) for i in by_state.values()]
    assert any(s > 0 for s in spreads)
    assert all(s == pytest.approx(1.0) or s == 0.0 for s in spreads)


class ShiftingBot(Player):
    """A bot that is not a function of the game: each move it makes is the next legal action
    in turn, counted over all its games (as a bot with an unseeded generator behaves)."""

    name = "shifting"

    def __init__(self) -> None:
        self.moves = itertools.count()

    def agent(self, *, seat: int, rng: random.Random, seed: int) -> BotAgent:
        moves = self.moves

        class Shifting(BotAgent):
            def choose(self, state: Any) -> int:
                legal = state.legal_actions()
                return legal[next(moves) % len(legal)]

        return Shifting()


def test_a_replay_that_renders_another_prompt_than_the_main_line_stops_the_step(
    policy: Policy,
) -> None:
    """Seeds 6-11 put the policy second: a replay of its first turn replays the bot's first move,
    which this bot makes differently, so the policy's prompt differs from the main line's."""
    step = play_tree_step(
        scripted_responder(policy, always_bet),
        [KUHN],
        tree=TreeSettings(branches=3),
        step=1,
        run_seed=0,
        games_per_step=12,
        options=EpisodeOptions(prompt_style="compact"),
        opponents={KUHN.name: ShiftingBot()},
    )
    with pytest.raises(MarsError, match="rendered another prompt than the main line's"):
        asyncio.run(step)


def test_replays_of_a_deterministic_game_pass_the_prompt_check(policy: Policy) -> None:
    rollout = tree_step(
        policy, TreeSettings(branches=3, continuation="random"), choose=garbage_first
    )
    assert rollout.extra["tree_replay_failed_groups"] == 0
    assert not any(row["replay_failed"] for row in rollout.rows)
