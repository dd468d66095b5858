"""Relabelled format examples (train_backend/pretrain/relabel.py) on real OpenSpiel positions:
the same position and move under new words, read back by the arena's own parser, and the
recipe field that mixes them in."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from games.actions import normalize_label
from games.parsing import parse_move
from games.spec import get_game
from games.variants import SKINS, variant
from train_backend.pretrain.build import pretrain_tiny_model
from train_backend.pretrain.examples import copy_stage_examples, training_examples
from train_backend.pretrain.play_quality import quality_positions
from train_backend.pretrain.recipe import PretrainSettings
from train_backend.pretrain.relabel import SCAFFOLD_LINES, relabelled

GAMES = ("kuhn_poker", "leduc_poker", "tic_tac_toe", "connect_four")


@pytest.mark.parametrize("game", GAMES)
def test_the_same_move_is_named_under_new_labels(game: str) -> None:
    rng = random.Random(0)
    renamed_labels = 0
    for example in quality_positions(game, 24):
        new = relabelled(example, rng)
        assert len(new.legal) == len(example.legal)
        assert len({normalize_label(label) for label in new.legal}) == len(new.legal)
        # the arena's parser reads the new reply as the move at the original move's place
        parsed = parse_move(new.reply, list(new.legal))
        assert parsed.label == new.move
        assert new.legal.index(new.move) == example.legal.index(example.move)
        # the prompt lists exactly the new labels, and the format's own lines are untouched
        lines = new.messages[-1]["content"].split("\n")
        legal_line = next(line for line in lines if line.startswith("Legal: "))
        assert legal_line == "Legal: " + " ".join(new.legal)
        assert [line for line in lines if line in SCAFFOLD_LINES] == [
            line for line in example.messages[-1]["content"].split("\n") if line in SCAFFOLD_LINES
        ]
        renamed_labels += new.legal != example.legal
    assert renamed_labels >= 12  # most examples read new labels


def test_board_rows_keep_their_shape_and_marks_stay_one_mark() -> None:
    rng = random.Random(1)
    for example in quality_positions("connect_four", 16):
        new = relabelled(example, rng)
        old_lines = example.messages[-1]["content"].split("\n")
        new_lines = new.messages[-1]["content"].split("\n")
        state = old_lines.index("State:")
        for old, row in zip(old_lines[state + 1 : -2], new_lines[state + 1 : -2], strict=True):
            assert len(row) == len(old)
            # a cell equal to another in the old row is equal to it in the new one
            for i in range(len(old)):
                for j in range(len(old)):
                    assert (old[i] == old[j]) == (row[i] == row[j])


def test_restated_state_is_renamed_as_the_prompt_is() -> None:
    settings = PretrainSettings(
        games=["kuhn_poker"], examples=40, relabel_share=1.0, reply_style="restate", full_share=0.0
    )
    for example in training_examples([get_game("kuhn_poker")], settings):
        if example.kind != "kuhn_poker":
            continue
        note = example.reply.split("\n<answer>")[0]
        state_line = example.messages[-1]["content"].split("\n")[-3]
        assert note == state_line


def test_invented_words_are_not_the_variants_words() -> None:
    """The evaluated variants stay out of the training data: no relabelled Kuhn example uses
    a word of kuhn_poker.v1's rules or labels that the original's prompts do not use."""
    spec = get_game("kuhn_poker")
    assert spec.name in SKINS
    renamed = variant(spec, 1)
    original_words = set(
        " ".join(e.messages[-1]["content"] for e in quality_positions("kuhn_poker", 12)).split()
    )
    variant_words = {
        word.strip("<>.,;:=")
        for word in (renamed.compact_rules + " " + " ".join(renamed.seat_names)).split()
    } - {w.strip("<>.,;:=") for w in original_words}
    variant_words = {w for w in variant_words if len(w) > 2}
    assert variant_words  # the variant has words of its own (e.g. its title, its moves)
    rng = random.Random(2)
    seen: set[str] = set()
    for example in quality_positions("kuhn_poker", 200):
        new = relabelled(example, rng)
        seen |= {w.strip("<>.,;:=") for w in new.messages[-1]["content"].split()}
    assert not (variant_words & seen)


def test_recipe_mixes_in_the_share_and_old_recipes_read_as_before() -> None:
    base = PretrainSettings(games=["tic_tac_toe", "kuhn_poker"], examples=300)
    assert "relabel_share" not in base.recipe()  # builds made before the field stay found
    mixed = base.model_copy(update={"relabel_share": 0.5})
    assert mixed.recipe()["relabel_share"] == 0.5
    specs = [get_game("tic_tac_toe"), get_game("kuhn_poker")]
    plain, some = training_examples(specs, base), training_examples(specs, mixed)
    assert len(plain) == len(some)
    changed = 0
    for old, new in zip(plain, some, strict=True):  # the same positions, the same order
        assert old.kind == new.kind
        if old.kind == "arithmetic":
            assert old == new
            continue
        assert old.legal.index(old.move) == new.legal.index(new.move)
        changed += old.messages != new.messages
    games = sum(e.kind != "arithmetic" for e in plain)
    assert 0.35 * games < changed < 0.65 * games


def test_copy_stage_runs_first_on_relabelled_examples_alone(tmp_path: Path) -> None:
    from core.tiny_model import ensure_tiny_model

    settings = PretrainSettings(
        games=["kuhn_poker"],
        examples=40,
        steps=2,
        full_share=0.0,
        eval_positions=0,
        warmup_steps=1,
        relabel_share=0.5,
        copy_steps=3,
        copy_batch_size=4,
    )
    assert settings.recipe()["copy_steps"] == 3
    assert "copy_steps" not in settings.model_copy(update={"copy_steps": 0}).recipe()
    stage = copy_stage_examples([get_game("kuhn_poker")], settings)
    assert len(stage) == 40 and all(e.kind == "kuhn_poker" for e in stage)
    assert sum(e.legal != ("<PASS>", "<BET>") for e in stage) >= 15  # relabelled, every one
    main = {
        e.messages[-1]["content"] for e in training_examples([get_game("kuhn_poker")], settings)
    }
    assert not main & {e.messages[-1]["content"] for e in stage}  # other positions or names
    report = pretrain_tiny_model(ensure_tiny_model(), tmp_path / "start", settings=settings)
    assert report["training"]["copy_stage"]["steps"] == 3
    assert report["recipe"]["copy_steps"] == 3


def test_copy_stage_of_a_board_recipe_with_a_search_teacher() -> None:
    """The copy stage's seeds still fit the 32-bit seeds OpenSpiel's bots take."""
    settings = PretrainSettings(
        games=["tic_tac_toe"],
        examples=12,
        full_share=0.0,
        relabel_share=0.4,
        copy_steps=10,
        reply_teachers={"tic_tac_toe": {"policy": "mcts:20", "temperature": 1.0}},
    )
    stage = copy_stage_examples([get_game("tic_tac_toe")], settings)
    assert len(stage) == 12
    assert all(parse_move(e.reply, list(e.legal)).label == e.move for e in stage)


def test_names_stay_distinct_when_every_letter_is_taken() -> None:
    from train_backend.pretrain.relabel import LETTERS, _Names

    names = _Names(random.Random(3))
    names.used |= set(LETTERS)
    fresh = names._fresh(lambda: names.rng.choice(LETTERS))
    assert fresh not in LETTERS and fresh in names.used


def test_invented_words_are_never_a_word_of_any_variant() -> None:
    """Uniform letters can spell `add` or `oak`; the reserved list of every variant's words
    stops them, and the fallback after 50 reserved draws (a trailing q) is reserved by none."""
    from train_backend.pretrain.relabel import RELABEL_VERSION, _Names, variant_words

    reserved = variant_words()
    assert {"push", "wait", "occupy", "copper"} <= reserved  # kuhn_poker.v1, tic_tac_toe.v1
    assert not any(word.endswith("q") for word in reserved)
    names = _Names(random.Random(4))
    drawn = {names.invented_word() for _ in range(20_000)}
    assert not drawn & reserved
    assert len({len(word) for word in drawn}) == 6  # 2 to 7 letters
    assert PretrainSettings(relabel_share=0.3).recipe()["relabel_version"] == RELABEL_VERSION
    assert "relabel_version" not in PretrainSettings().recipe()


def test_boards_restate_their_rows_under_restate_all_renamed_as_the_prompt() -> None:
    specs = [get_game("tic_tac_toe"), get_game("kuhn_poker")]
    settings = PretrainSettings(
        games=["tic_tac_toe", "kuhn_poker"], examples=60, full_share=0.0, relabel_share=1.0
    )
    for style, boards_restate in (("restate", False), ("restate_all", True)):
        chosen = settings.model_copy(update={"reply_style": style})
        for example in training_examples(specs, chosen):
            if example.kind != "tic_tac_toe":
                continue
            note = example.reply.split("\n<answer>")[0]
            assert note.startswith("I choose ") != boards_restate
            if boards_restate:  # the rows as the prompt shows them, renamed marks and dots too
                lines = example.messages[-1]["content"].split("\n")
                rows = lines[lines.index("State:") + 1 : lines.index("State:") + 4]
                assert note == "; ".join(rows)
            assert parse_move(example.reply, list(example.legal)).label == example.move
