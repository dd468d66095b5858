"""Paper parity (docs/parity.md): each switch between this project's choices and the released
MARSHAL code's, checked by hand on small cases, and the `marshal` preset that selects them all.

Every expected number is derived in the comments; nothing is computed by a second copy of the
code under test.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_games_rewards import play, rewards

from core.errors import MarsError
from games.chance import ChanceSampler, deal_table, leduc_rank_triples
from games.parsing import parse_move
from games.rewards import length_penalty, pay_step
from games.rules import PlayRules
from games.spec import get_game
from mars.main import app, register_commands
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig, load_train_config
from train_backend.local.ppo import ppo_loss
from train_backend.local.trainer import learning_rate_at
from train_backend.presets import MARSHAL_PRESET

register_commands()
STEP = PlayRules(turn_rewards="step")

# Mini Hanabi, seed 0: seat 0 holds Y1 Y1 R1, seat 1 holds R1 Y1 R2 (cards 1..3 of the labels).
# Seat 0 plays its Y1 (1 point), seat 1 plays its R1 (2 points), seat 0 reveals, seat 1 replies
# without an answer tag: an invalid move at a score of 2.
HANABI_MOVES = {0: ["<Play card 1>", "<Reveal color R>"], 1: ["<Play card 1>", "GARBAGE"]}


# -- Hanabi: per-step rewards ---------------------------------------------------------------------


def test_step_rewards_pay_each_point_on_the_turn_that_scored_it_and_the_partners_latest() -> None:
    result = play("mini_hanabi", HANABI_MOVES, rules=PlayRules(turn_rewards="step"))
    # Seat 0's first turn: +0.05 format, +1 for its own point, +1 for seat 1's point (seat 0's
    # latest turn when seat 1 scored). Seat 1's first turn: +0.05 and +1 for its own point; it had
    # no turn yet when seat 0 scored, so that point is not paid to it (as in the code).
    assert rewards(result, 0) == pytest.approx([2.05, 0.05])
    # The invalid reply (forfeit, the default): -score - 10 = -12.
    assert rewards(result, 1) == pytest.approx([1.05, -12.0])


def test_outcome_rewards_pay_hanabi_only_at_the_end() -> None:
    result = play("mini_hanabi", HANABI_MOVES)
    # No point is paid as it is scored; the forfeit takes the score from both seats.
    assert rewards(result, 0) == pytest.approx([0.05, 0.05])
    assert rewards(result, 1) == pytest.approx([0.05, -12.0])
    assert result.returns == [0.0, 0.0]


def test_a_terminal_step_that_pays_zero_pays_a_tenth_in_hanabi_as_the_code_does() -> None:
    spec = get_game("mini_hanabi")
    rng = random.Random(7)
    for _ in range(200):  # random games until one ends on a step that scored nothing
        state = spec.game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(rng.choice([a for a, _ in state.chance_outcomes()]))
                continue
            seat = state.current_player()
            state.apply_action(rng.choice(state.legal_actions()))
        if state.rewards() == [0.0, 0.0]:
            break
    else:
        pytest.fail("no random game ended on a zero step")
    latest = [{"reward": 0.05}, {"reward": 0.05}]
    pay_step(spec, state, seat, latest)  # type: ignore[arg-type]
    assert [t["reward"] for t in latest] == pytest.approx([0.15, 0.15])


@pytest.mark.parametrize(
    ("game", "moves"),
    [
        ("tic_tac_toe", {0: ["<X(0,0)>", "<X(0,1)>", "<X(0,2)>"], 1: ["<O(1,0)>", "<O(1,1)>"]}),
        ("kuhn_poker", {0: ["<BET>"], 1: ["<BET>"]}),
    ],
)
def test_step_rewards_equal_outcome_rewards_where_openspiel_pays_only_at_the_end(
    game: str, moves: dict[int, list[str]]
) -> None:
    by_outcome = play(game, moves)
    by_step = play(game, moves, rules=STEP)
    for seat in (0, 1):
        assert rewards(by_step, seat) == pytest.approx(rewards(by_outcome, seat))
    assert by_step.returns == by_outcome.returns


# -- invalid moves --------------------------------------------------------------------------------


def test_reference_invalid_outcome_with_step_rewards_keeps_the_partners_points() -> None:
    rules = PlayRules(turn_rewards="step", invalid_outcome="reference")
    result = play("mini_hanabi", HANABI_MOVES, rules=rules)
    # The evaluation return keeps the score so far (2) for both seats.
    assert result.returns == [2.0, 2.0] and result.invalid_seat == 1
    # The partner keeps the 2 points it was paid; the offender gets -score - 10 = -12 on top of
    # the 1 point it was paid, so its game-outcome rewards sum to 1 - 12 = -11 (-10 had it seen
    # both points; the first was scored before its first turn).
    assert rewards(result, 0) == pytest.approx([2.05, 0.05])
    assert rewards(result, 1) == pytest.approx([1.05, -12.0])


def test_reference_invalid_outcome_with_outcome_rewards_pays_the_partner_the_score() -> None:
    result = play("mini_hanabi", HANABI_MOVES, rules=PlayRules(invalid_outcome="reference"))
    assert result.returns == [2.0, 2.0]
    # The partner's last turn gets the score so far; the offender's rewards sum to -10 + 0.05.
    assert rewards(result, 0) == pytest.approx([0.05, 2.05])
    assert rewards(result, 1) == pytest.approx([0.05, -10.0])


def test_reference_invalid_outcome_in_poker_pays_the_other_seat_what_the_offender_loses() -> None:
    moves = {0: ["<BET>"], 1: ["GARBAGE"]}  # seat 1 had put in its ante of 1 chip
    forfeit_result = play("kuhn_poker", moves)
    reference_result = play("kuhn_poker", moves, rules=PlayRules(invalid_outcome="reference"))
    assert forfeit_result.returns == [0.0, -1.0]
    assert reference_result.returns == [1.0, -1.0]
    for result in (forfeit_result, reference_result):  # training rewards: -bet - 10, nothing more
        assert rewards(result, 0) == pytest.approx([0.05])
        assert rewards(result, 1) == pytest.approx([-11.0])


# -- length penalty -------------------------------------------------------------------------------


def test_the_codes_length_penalty_is_half_a_point_per_2037_tokens_over_2048_uncapped() -> None:
    rules = get_game("tic_tac_toe").rewards
    assert length_penalty(rules, 2048, "reference") == 0.0
    assert length_penalty(rules, 2048 + 2037, "reference") == pytest.approx(0.5)
    assert length_penalty(rules, 3000, "reference") == pytest.approx(0.5 * 952 / 2037)
    assert length_penalty(rules, 2048 + 4074, "reference") == pytest.approx(1.0)  # no cap
    # This project's light penalty: 0.1 per 2,048 tokens over, at most 0.5.
    assert length_penalty(rules, 4096, "light") == pytest.approx(0.1)
    assert length_penalty(rules, 100_000, "light") == pytest.approx(0.5)


# -- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "strict", "lenient"),
    [
        ("<answer><BET></answer>", "<BET>", "<BET>"),
        ("<think>J is weak</think>\n\n<answer><PASS></answer>", "<PASS>", "<PASS>"),
        ("\n\n<answer><BET></answer>\n", "<BET>", "<BET>"),  # a reasoning parser's blank line
        ("<answer> <BET> </answer>", "<BET>", "<BET>"),
        ("<answer><BET> || <PASS></answer>", "<BET>", None),  # the code keeps the first action
        ("<answer><bet></answer>", None, "<BET>"),  # case
        ("<answer>BET</answer>", None, "<BET>"),  # brackets
        ("I bet. <answer><BET></answer>", None, "<BET>"),  # text before the tag
        ("<answer><BET></answer> Good luck!", None, "<BET>"),  # text after the tag
        ("<answer></answer>", None, None),
        ("BET", None, None),
    ],
)
def test_strict_and_lenient_parsing(reply: str, strict: str | None, lenient: str | None) -> None:
    legal = ["<PASS>", "<BET>"]
    assert parse_move(reply, legal, "strict").label == strict
    assert parse_move(reply, legal, "lenient").label == lenient
    assert parse_move(reply, legal).label == lenient  # lenient is the default


def test_a_strict_episode_ends_on_a_reply_the_lenient_one_accepts() -> None:
    moves = {0: ["<bet>"], 1: ["<BET>"]}
    assert play("kuhn_poker", moves).invalid_seat is None
    assert play("kuhn_poker", moves, rules=PlayRules(parse_mode="strict")).invalid_seat == 0


# -- Leduc deals ----------------------------------------------------------------------------------


def test_the_codes_leduc_deals_are_the_24_rank_triples() -> None:
    triples = leduc_rank_triples()
    ranks = [tuple(card // 2 for card in deal) for deal in triples]
    assert len(triples) == 24 and len(set(ranks)) == 24
    assert all(len(set(deal)) == 3 for deal in triples)  # three different cards
    assert triples[0] == (0, 1, 2)  # J, J, Q: the first permutation of cards 0..5
    # The first seat pairs the public card in 6 of 24 deals (25%): rank r for both, 2 others.
    assert sum(r[0] == r[2] for r in ranks) == 6
    assert deal_table(get_game("leduc_poker"), "natural") is None
    assert deal_table(get_game("kuhn_poker"), "rank_triples") is None


def test_seed_s_plays_rank_triple_s_mod_24_including_the_public_card() -> None:
    spec = get_game("leduc_poker")
    deals = deal_table(spec, "rank_triples")
    for seed in (0, 5, 29):
        state = spec.game.new_initial_state()
        sampler = ChanceSampler(spec, seed, deals)
        while state.is_chance_node():
            state.apply_action(sampler.sample(state))
        state.apply_action(1)  # both seats call: round 2 deals the public card
        state.apply_action(1)
        state.apply_action(sampler.sample(state))
        history = state.history()
        assert (history[0], history[1], history[4]) == leduc_rank_triples()[seed % 24]


# -- loss and optimiser ---------------------------------------------------------------------------


def test_the_dual_clip_value_on_a_hand_made_ratio_and_advantage() -> None:
    # One token, ratio 2, advantage -1, clip 0.2: the PPO term is max(-A r, -A clip(r)) =
    # max(2, 1.2) = 2; the dual clip bounds it by -A c: 1.4 with the code's c = 1.4, and it stays
    # 2 under this project's default c = 3.
    args = (torch.tensor([[math.log(2.0)]]), torch.zeros(1, 1), torch.tensor([-1.0]))
    mask = torch.ones(1, 1)
    assert ppo_loss(*args, mask, dual_clip=1.4).pg_loss == pytest.approx(1.4)
    assert ppo_loss(*args, mask, dual_clip=3.0).pg_loss == pytest.approx(2.0)
    # A positive advantage is never dual-clipped: -A clip(2) = -1.2 beats -A r = -2.
    positive = (args[0], args[1], torch.tensor([1.0]))
    assert ppo_loss(*positive, mask, dual_clip=1.4).pg_loss == pytest.approx(-1.2)


def test_the_cosine_schedule_decays_to_its_floor() -> None:
    config = TrainConfig(steps=11, warmup_steps=1, learning_rate=1.0, min_lr_ratio=0.1)
    # Update 2 is the first after warm-up (progress 0): the peak. Update 7 is half way through
    # the 10 decay updates (progress 0.5): floor + (1 - floor) / 2 = 0.55.
    assert learning_rate_at(2, config) == pytest.approx(1.0)
    assert learning_rate_at(7, config) == pytest.approx(0.55)
    assert learning_rate_at(12, config) == pytest.approx(0.1)  # progress 1: the floor


# -- ablation switches on marshal_reference -------------------------------------------------------

# One Kuhn batch, one token per turn. ep 0: seat 0 [1, 1], seat 1 [-1]; ep 1: seat 0 [3], seat 1 [1]
SWITCH_BATCH = {
    "game": ["kuhn_poker"] * 5,
    "episode": [0, 0, 0, 1, 1],
    "seat": [0, 0, 1, 0, 1],
    "turn": [0, 1, 0, 0, 0],
    "reward": [1.0, 1.0, -1.0, 3.0, 1.0],
}


def test_without_turn_level_every_turn_gets_its_trajectorys_centred_total() -> None:
    # Totals: e0s0 2, e0s1 -1, e1s0 3, e1s1 1. Centred per seat: s0 (mean 2.5) -0.5, +0.5; s1
    # (mean 0) -1, +1. Whitening over the 4 trajectories divides by sqrt(0.625); every turn gets
    # its trajectory's value, so the rows are proportional to [-1, -1, -2, 1, 2]. The per-seat
    # baselines over distinct values are 0 (s0: +-1, s1: +-2). Token whitening of
    # [-1, -1, -2, 1, 2]: mean -0.2, deviations [-0.8, -0.8, -1.8, 1.2, 2.2], variance 2.16.
    advantages = compute_advantages(SWITCH_BATCH, "marshal_reference", turn_level=False)
    expected = np.array([-0.8, -0.8, -1.8, 1.2, 2.2]) / math.sqrt(2.16)
    assert advantages == pytest.approx(expected, abs=1e-6)


def test_without_agent_specific_one_centre_and_one_baseline_serve_both_seats() -> None:
    # Centred over the game's turns (mean 1): [0, 0, -2, 2, 0]; whitened (a rescale); turn-level
    # returns: e0s0 0 + 0 = 0, 0; e0s1 -2; e1s0 2; e1s1 0. One baseline over the distinct values
    # {0, -2, 2}: 0. Token whitening: mean 0, variance 8 / 5.
    advantages = compute_advantages(SWITCH_BATCH, "marshal_reference", agent_specific=False)
    expected = np.array([0.0, 0.0, -2.0, 2.0, 0.0]) / math.sqrt(1.6)
    assert advantages == pytest.approx(expected, abs=1e-6)
    # With the seat split (the default) seat 0's centre is 5/3: the values differ.
    assert not np.allclose(compute_advantages(SWITCH_BATCH, "marshal_reference"), expected)


def test_the_distinct_value_baseline_does_not_depend_on_float32_rounding_of_the_rewards() -> None:
    # A verl CPU step's batch (Tic-Tac-Toe and Kuhn, a 0.05 format bonus): verl hands the
    # estimator float32 rewards, the turn records keep float64. Exact equality of the turn-level
    # returns made two returns one distinct value on one path and two on the other.
    batch = {
        "game": ["tic_tac_toe"] * 4 + ["kuhn_poker"] * 4 + ["tic_tac_toe"] * 2 + ["kuhn_poker"] * 3,
        "episode": ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f", "f", "f"],
        "seat": [0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1],
        "turn": [0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0],
        "reward": [0.0, -11.0, 0.0, -11.0, -0.95, 1.05, -0.95, 1.05, 0.0, -11.0, 0.05, 2.05, -1.95],
        "tokens": [8, 8, 8, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8],
    }
    as_float32 = {**batch, "reward": [float(np.float32(r)) for r in batch["reward"]]}
    assert as_float32["reward"] != batch["reward"]
    assert compute_advantages(as_float32, "marshal_reference") == pytest.approx(
        compute_advantages(batch, "marshal_reference"), abs=1e-6
    )


def test_only_marshal_reference_takes_the_switches_and_on_they_change_nothing() -> None:
    on = compute_advantages(SWITCH_BATCH, "marshal_reference", turn_level=True, agent_specific=True)
    assert on == pytest.approx(compute_advantages(SWITCH_BATCH, "marshal_reference"))
    with pytest.raises(MarsError, match="only marshal_reference"):
        compute_advantages(SWITCH_BATCH, "marshal", turn_level=False)
    with pytest.raises(MarsError, match="true or false"):
        compute_advantages(SWITCH_BATCH, "marshal_reference", turn_level="no")


# -- the preset -----------------------------------------------------------------------------------


def test_the_local_dry_run_prints_every_preset_value() -> None:
    result = CliRunner().invoke(
        app, ["train", "--trainer", "local", "--preset", "marshal", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output[: result.output.rindex("}") + 1])
    for key, value in MARSHAL_PRESET.items():
        assert printed[key] == value, key
    assert printed["preset"] == "marshal"


def test_flags_and_files_override_the_preset(tmp_path: Path) -> None:
    config_file = tmp_path / "run.yaml"
    config_file.write_text("preset: marshal\nparse_mode: lenient\n")
    config = load_train_config(config_file, {"learning_rate": 3e-4}, local=True)
    assert config.parse_mode == "lenient" and config.learning_rate == 3e-4
    assert config.dual_clip == 1.4 and config.turn_rewards == "step"
    assert load_train_config(None, {}, local=True).dual_clip == 3.0  # no preset: the defaults
    with pytest.raises(MarsError, match="unknown preset 'paper'"):
        load_train_config(None, {"preset": "paper"}, local=True)


def _verl_dry_run(run_dir: Path, *args: str) -> dict[str, str]:
    pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")
    result = CliRunner().invoke(
        app, ["train", "--trainer", "verl", "--dry-run", "--run-dir", str(run_dir), *args]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    words = shlex.split(result.output.strip().splitlines()[-2])
    overrides = words[words.index("verl.trainer.main_ppo") + 1 :]
    return dict(item.split("=", 1) for item in overrides)


def test_the_verl_dry_run_with_the_preset_carries_the_codes_loss_and_optimiser(tmp_path) -> None:
    settings = _verl_dry_run(
        tmp_path / "paper", "--preset", "marshal", "--model", "Qwen/Qwen3-4B", "--steps", "2"
    )
    actor = "actor_rollout_ref.actor"
    assert settings[f"{actor}.clip_ratio_c"] == "1.4"
    assert settings[f"{actor}.optim.betas"] == "[0.9,0.95]"
    assert settings[f"{actor}.optim.min_lr_ratio"] == "0.0"
    assert settings["algorithm.adv_estimator"] == "marshal_reference"
    info = json.loads((tmp_path / "paper" / "run.json").read_text())
    assert info["status"] == "dry_run"  # a dry run trained nothing
    assert info["config"]["parse_mode"] == "strict" and info["config"]["preset"] == "marshal"


def test_verl_uses_the_preset_by_default_and_none_turns_it_off(tmp_path) -> None:
    default = _verl_dry_run(tmp_path / "default", "--model", "Qwen/Qwen3-4B", "--steps", "2")
    off = _verl_dry_run(
        tmp_path / "off", "--model", "Qwen/Qwen3-4B", "--steps", "2", "--preset", "none"
    )
    assert default["actor_rollout_ref.actor.clip_ratio_c"] == "1.4"
    assert off["actor_rollout_ref.actor.clip_ratio_c"] == "3.0"
    assert off["algorithm.adv_estimator"] == "marshal"


def test_the_arena_records_its_rules_and_refuses_to_resume_under_other_ones(tmp_path) -> None:
    from conftest import run_mars

    run_dir = tmp_path / "leduc"
    args = ["arena", "--game", "leduc_poker", "--player", "random", "--opponent", "nash"]
    args += ["--episodes", "4", "--run-dir", str(run_dir), "--quiet"]
    first = run_mars(*args, "--rules", "marshal", "--parse-mode", "lenient")
    assert first.returncode == 0, first.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rules"] == {
        "turn_rewards": "step",
        "invalid_outcome": "reference",
        "length_penalty": "reference",
        "leduc_deals": "rank_triples",
        "parse_mode": "lenient",
    }
    records = (run_dir / "records.jsonl").read_bytes()
    again = run_mars(*args, "--rules", "default")
    assert again.returncode != 0 and "rules" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert (run_dir / "records.jsonl").read_bytes() == records
