"""What bench/start_quality.py measures of a start: invalid replies read as the arena reads them,
the entropy of the moves named, the positions, and which games an experiment evaluates from
each of its starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mars.orchestration.experiments import load_experiment
from train_backend.pretrain.play_quality import entropy_bits, game_quality, quality_positions

BENCH = Path(__file__).resolve().parents[1] / "bench" / "start_quality.py"


def test_entropy_is_zero_for_one_move_and_log2_for_uniform_moves() -> None:
    assert entropy_bits(["<A>"] * 5) == 0.0
    assert entropy_bits([]) == 0.0
    assert entropy_bits(["<A>", "<B>", "<C>", "<D>"]) == pytest.approx(2.0)
    assert entropy_bits(["<A>", "<A>", "<A>", "<B>"]) == pytest.approx(0.8113, abs=1e-4)


def test_invalid_replies_and_entropy_per_game() -> None:
    legal = [("<PASS>", "<BET>"), ("<PASS>", "<BET>", "<FOLD>", "<RAISE>")]
    sampled = [
        # one fixed move, and one reply naming no legal move
        ["<answer><PASS></answer>", "<answer><PASS></answer>", "I choose <CALL>.", ""],
        # four different legal moves
        [f"x\n<answer>{label}</answer>" for label in legal[1]],
    ]
    quality = game_quality("g", legal, sampled, ["<answer><BET></answer>", "no answer"])
    assert quality.replies == 8 and quality.positions == 2
    assert quality.invalid_share == pytest.approx(2 / 8)
    assert quality.greedy_invalid_share == pytest.approx(0.5)
    assert quality.entropy_bits == pytest.approx((0.0 + 2.0) / 2)  # invalid ones left out
    assert quality.uniform_bits == pytest.approx((1.0 + 2.0) / 2)
    assert quality.as_dict()["invalid_share"] == 0.25


def test_a_variant_is_measured_on_its_originals_positions() -> None:
    original = quality_positions("kuhn_poker", 12)
    variant = quality_positions("kuhn_poker.v1", 12)
    assert len(original) == len(variant) == 12
    assert [len(e.legal) for e in original] == [len(e.legal) for e in variant]
    assert all(a.messages != b.messages for a, b in zip(original, variant, strict=True))
    assert all(e.style == "compact" for e in original)
    assert quality_positions("kuhn_poker", 12, seed=1) != original  # another seed, other games


def test_the_bench_measures_each_start_on_the_games_evaluated_from_it() -> None:
    spec = importlib.util.spec_from_file_location("start_quality", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    experiment = load_experiment("marshal-mini")
    assert bench.evaluated_games(experiment, "poker") == [
        "kuhn_poker",
        "kuhn_poker.v1",
        "leduc_poker",
    ]
    assert bench.evaluated_games(experiment, "board") == [
        "tic_tac_toe",
        "tic_tac_toe.v1",
        "connect_four",
    ]
