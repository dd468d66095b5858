"""Format pre-training of the tiny model: data, a small real run, determinism, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_mars

from core.errors import MarsError
from games.parsing import parse_move
from games.spec import get_game
from train_backend.pretrain.build import REPORT_FILE, PretrainSettings, pretrain_tiny_model
from train_backend.pretrain.format_data import build_teachers, game_examples, teachers_for


@pytest.fixture(scope="module")
def tiny_model_dir() -> Path:
    from core.tiny_model import ensure_tiny_model

    return ensure_tiny_model()


@pytest.mark.parametrize("style", ["compact", "full"])
def test_every_synthetic_reply_is_a_legal_move_for_its_prompt(style: str) -> None:
    for name in ("tic_tac_toe", "kuhn_poker", "mini_hanabi"):
        spec = get_game(name)
        teachers = build_teachers(spec, teachers_for(spec))
        for share in (0.0, 1.0):
            examples = game_examples(
                spec, style, count=40, first_seed=3, teachers=teachers, last_listed_share=share
            )
            assert len(examples) == 40
            for example in examples:
                move = parse_move(example.reply, list(example.legal))
                assert move.ok, (example.reply, example.legal)
                assert "<think>" not in example.reply
                assert (
                    example.messages[-1]["content"]
                    .rstrip()
                    .endswith(("Reply <answer>ACTION</answer>.", example.legal[-1]))
                )
                if share == 1.0:
                    assert move.label == example.legal[-1]


def test_restating_replies_copy_the_seats_view_then_name_one_legal_move() -> None:
    spec = get_game("kuhn_poker")
    examples = game_examples(
        spec, "compact", count=60, first_seed=9, teachers=build_teachers(spec, ["random"]),
        restate=True,
    )  # fmt: skip
    for example in examples:
        note, answer = example.reply.split("\n")
        prompt = example.messages[-1]["content"]
        assert note in prompt  # Kuhn's compact view is one line: copied whole
        assert note.startswith("card ") and "I choose" not in example.reply
        assert parse_move(answer, list(example.legal)).label == example.move
    # A random teacher names both moves about equally whatever the card: no strategy is taught.
    for card in "JQK":
        moves = [e.move for e in examples if e.reply.startswith(f"card {card}")]
        assert 0.2 < moves.count("<BET>") / len(moves) < 0.8


def test_recipe_teachers_replace_the_default_bots_per_game() -> None:
    from train_backend.pretrain.build import SELFPLAY_START, training_examples

    def j_calls(teachers: list[str]) -> tuple[int, int]:
        settings = SELFPLAY_START.model_copy(
            update={"examples": 300, "arithmetic_share": 0.0, "teachers": {"kuhn_poker": teachers}}
        )
        examples = training_examples([get_game("kuhn_poker")], settings)
        facing = [e for e in examples if e.reply.startswith("card J; bets: opponent BET")]
        return sum(e.move == "<BET>" for e in facing), len(facing)

    # An equilibrium policy never calls a bet with the J; a random one calls half the time.
    calls, positions = j_calls(["cfr:300"])
    assert positions > 5 and calls == 0
    calls, positions = j_calls(["random"])
    assert positions > 5 and calls > 0


def test_full_style_chats_carry_the_seats_earlier_replies() -> None:
    spec = get_game("tic_tac_toe")
    examples = game_examples(
        spec, "full", count=30, first_seed=0, teachers=build_teachers(spec, ["random"])
    )
    later = [e for e in examples if len(e.messages) > 2]
    assert later, "some positions are past the seat's first turn"
    for example in later:
        replies = [m["content"] for m in example.messages if m["role"] == "assistant"]
        assert all(parse_move(r, [r.split("<answer>")[1][:-9]]).ok for r in replies)


def test_balancing_spreads_the_named_moves() -> None:
    spec = get_game("tic_tac_toe")
    teachers = build_teachers(spec, ["random"])

    def top_share(balance: int) -> float:
        examples = game_examples(
            spec,
            "compact",
            count=180,
            first_seed=0,
            teachers=teachers,
            last_listed_share=1.0,
            balance=balance,
        )
        counts: dict[str, int] = {}
        for example in examples:
            counts[example.reply] = counts.get(example.reply, 0) + 1
        return max(counts.values()) / len(examples)

    unbalanced, balanced = top_share(1), top_share(3)
    assert unbalanced > 0.25  # <X(2,2)>/<O(2,2)> dominate unbalanced
    assert balanced < unbalanced / 2


SMALL = PretrainSettings(
    games=["kuhn_poker"],
    examples=160,
    steps=30,
    full_share=0.0,
    arithmetic_share=0.0,
    eval_positions=16,
    eval_full_positions=0,
    warmup_steps=3,
)


def test_the_same_seed_gives_the_same_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    tiny = SMALL.model_copy(update={"steps": 4, "examples": 40, "eval_positions": 0})
    paths = []
    for run, seed in (("a", 5), ("b", 5), ("c", 6)):
        out = tmp_path / run
        pretrain_tiny_model(tiny_model_dir, out, games=tiny.games, seed=seed, settings=tiny)
        paths.append(out / "model.safetensors")
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b
    assert a != c


def test_bad_input_is_one_clear_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(MarsError, match="unknown game"):
        pretrain_tiny_model(tiny_model_dir, tmp_path / "x", games=["chess"], settings=SMALL)
    with pytest.raises(MarsError, match="not found"):
        pretrain_tiny_model(tmp_path / "missing", tmp_path / "x", settings=SMALL)
    (tmp_path / "no-config").mkdir()
    with pytest.raises(MarsError, match=r"config\.json"):
        pretrain_tiny_model(tmp_path / "no-config", tmp_path / "x", settings=SMALL)
    with pytest.raises(MarsError, match="steps"):
        pretrain_tiny_model(tiny_model_dir, tmp_path / "x", steps=-1, settings=SMALL)
    with pytest.raises(MarsError, match="must differ"):
        pretrain_tiny_model(tiny_model_dir, tiny_model_dir, settings=SMALL)
    assert not (tmp_path / "x").exists()


def test_pretrain_command_prints_the_rates_and_writes_the_model(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cli-pretrained"
    result = run_mars(
        "tiny-model", "pretrain", "--model", str(tiny_model_dir), "--out", str(out),
        "--games", "kuhn_poker", "--examples", "160", "--steps", "15", "--eval-positions", "16",
        "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / REPORT_FILE).read_text())
    after = report["evaluation"]["after"]["kuhn_poker/compact"]
    assert after["n"] == 16 and after["rate"] >= 0.9
    assert report["evaluation"]["legal_rate_before"]["kuhn_poker/compact"] < after["rate"]
    assert f"{after['rate']:.3f}" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == str(out)
    assert report["training"]["last_loss"] < report["training"]["first_loss"]
    assert report["recipe"]["games"] == ["kuhn_poker"] and report["recipe"]["steps"] == 15
    # a model folder transformers loads as it is, with the tiny model's chat template
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (out / name).is_file()
    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() == report["parameters"]
    assert (
        AutoTokenizer.from_pretrained(out)
        .apply_chat_template(
            [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
        )
        .endswith("assistant\n")
    )

    again = run_mars(
        "tiny-model", "pretrain", "--model", str(tiny_model_dir), "--out", str(out), "--quiet"
    )
    assert again.returncode != 0
    assert "already exists" in again.stderr and "Traceback" not in again.stderr
    unknown = run_mars("tiny-model", "pretrain", "--games", "chess", "--out", str(tmp_path / "c"))
    assert unknown.returncode != 0 and "unknown game" in unknown.stderr
    assert "Traceback" not in unknown.stderr and not (tmp_path / "c").exists()


def test_a_reply_teacher_names_its_own_moves_in_the_replies() -> None:
    from games.players.minimax import best_actions
    from train_backend.pretrain.format_data import reply_teacher_for

    spec = get_game("tic_tac_toe")
    teacher = reply_teacher_for(spec, "minimax:last")
    assert teacher is not None
    assert reply_teacher_for(get_game("connect_four"), "minimax:last") is None  # too large
    assert reply_teacher_for(get_game("kuhn_poker"), "minimax:last") is None
    examples = game_examples(
        spec, "compact", count=40, first_seed=1, teachers=build_teachers(spec, ["random"]),
        reply_teacher=teacher,
    )  # fmt: skip
    for example in examples:
        state = _board_state(spec, example.messages[-1]["content"])
        move = parse_move(example.reply, list(example.legal))
        row, col = (int(c) for c in move.label.split("(")[1].rstrip(")>").split(","))
        assert row * 3 + col == best_actions(spec.game, state)[-1]


def _board_state(spec, prompt: str):  # type: ignore[no-untyped-def]
    """The Tic-Tac-Toe state a compact prompt shows (any move order gives the same board)."""
    lines = prompt.split("State:\n")[1].splitlines()[:3]
    cells = "".join(lines)
    xs = [i for i, c in enumerate(cells) if c == "x"]
    os_ = [i for i, c in enumerate(cells) if c == "o"]
    state = spec.game.new_initial_state()
    for index in range(len(xs) + len(os_)):
        state.apply_action(xs[index // 2] if index % 2 == 0 else os_[index // 2])
    return state


def test_a_tactics_teacher_wins_or_blocks_and_otherwise_names_the_last_listed_move() -> None:
    from games.players.tactics import candidate_actions
    from train_backend.pretrain.format_data import reply_teacher_for

    spec = get_game("tic_tac_toe")
    teacher = reply_teacher_for(spec, "tactics:last")
    assert teacher is not None and reply_teacher_for(get_game("kuhn_poker"), "tactics") is None
    examples = game_examples(
        spec, "compact", count=60, first_seed=5, teachers=build_teachers(spec, ["random"]),
        reply_teacher=teacher,
    )  # fmt: skip
    not_last = 0
    for example in examples:
        state = _board_state(spec, example.messages[-1]["content"])
        move = parse_move(example.reply, list(example.legal))
        row, col = (int(c) for c in move.label.split("(")[1].rstrip(")>").split(","))
        assert row * 3 + col == candidate_actions(state)[-1]
        not_last += move.label != example.legal[-1]
    assert not_last > 0  # some positions called for a win or a block


def test_a_recipe_file_sets_the_pretraining_and_flags_override_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    recipe = tmp_path / "tactics.yaml"
    recipe.write_text(
        "games: [tic_tac_toe]\nreply_teacher: 'tactics:last'\nexamples: 64\nsteps: 50\n"
        "arithmetic_share: 0.0\nfull_share: 0.0\neval_positions: 8\neval_full_positions: 0\n"
    )
    out = tmp_path / "from-recipe"
    result = run_mars(
        "tiny-model", "pretrain", "--model", str(tiny_model_dir), "--out", str(out),
        "--recipe", str(recipe), "--steps", "4", "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["recipe"]["reply_teacher"] == "tactics:last"
    assert report["recipe"]["games"] == ["tic_tac_toe"] and report["recipe"]["examples"] == 64
    assert report["recipe"]["steps"] == 4  # the flag won over the recipe's 50
    assert set(report["evaluation"]["after"]) == {"tic_tac_toe/compact"}

    recipe.write_text("games: [tic_tac_toe]\nstepz: 4\n")
    bad = run_mars("tiny-model", "pretrain", "--recipe", str(recipe), "--out", str(tmp_path / "b"))
    assert bad.returncode != 0 and "unknown pre-training setting 'stepz'" in bad.stderr
    missing = run_mars("tiny-model", "pretrain", "--recipe", str(tmp_path / "none.yaml"))
    assert missing.returncode != 0 and "cannot read recipe" in missing.stderr
    for text in (bad.stderr, missing.stderr):
        assert "Traceback" not in text and len(text.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_a_stage_with_stop_below_ends_once_its_loss_has_fallen() -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from core.reply_tuning import STOP_WINDOW
    from train_backend.pretrain.reply_training import train_on_replies

    def trained(stop_below: float | None, steps: int) -> list[float]:
        torch.manual_seed(0)
        config = Qwen3Config(
            vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        )  # fmt: skip
        rows = [([1, 2, 3, 4, 5], 2), ([1, 6, 7, 8, 9], 2)]  # two replies to learn by heart
        settings = PretrainSettings(steps=steps, batch_size=2, learning_rate=1e-2, warmup_steps=0)
        return train_on_replies(Qwen3ForCausalLM(config), rows, settings, 0, None, stop_below)

    stopped = trained(0.3, 400)
    assert STOP_WINDOW <= len(stopped) < 400

    def mean(window: list[float]) -> float:
        return sum(window) / len(window)

    # it stopped at the first step whose last 25 losses averaged under 0.3, not later
    assert mean(stopped[-STOP_WINDOW:]) < 0.3 <= mean(stopped[-STOP_WINDOW - 1 : -1])
    assert len(trained(None, 60)) == 60  # without it, every step runs
