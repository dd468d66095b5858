"""`mars loop` pieces that need no server: the spec grammar, checkpoint discovery, the curve."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from core.errors import MarsError
from core.runstore import RunDir
from mars.orchestration.loop import (
    ArenaItem,
    Checkpoint,
    SuiteItem,
    check_spec,
    checkpoints_folder,
    complete_checkpoints,
    parse_spec,
    resolve_settings,
    run_loop,
    training_finished,
    write_curve,
)


def test_inline_items_keep_colons_inside_the_opponent() -> None:
    spec = parse_spec(
        "arena:tic_tac_toe:random:20, arena:tic_tac_toe:mcts:100:20,eval:gsm8k:single:5"
    )
    first, second, third = spec.evals
    assert isinstance(first, ArenaItem) and (first.opponent, first.episodes) == ("random", 20)
    assert isinstance(second, ArenaItem) and (second.opponent, second.episodes) == ("mcts:100", 20)
    assert isinstance(third, SuiteItem) and (third.suite, third.mas, third.limit) == (
        "gsm8k",
        "single",
        5,
    )
    assert [item.key for item in spec.evals] == [
        "arena-tic_tac_toe-random",
        "arena-tic_tac_toe-mcts100",
        "eval-gsm8k-single",
    ]


def test_suite_items_default_to_the_single_agent_and_no_limit() -> None:
    (item,) = parse_spec("eval:math500").evals
    assert isinstance(item, SuiteItem) and item.mas == "single" and item.limit is None


@pytest.mark.parametrize(
    "text",
    [
        "arena:tic_tac_toe:random",  # no episode count
        "eval:gsm8k:single:five",
        "bench:gsm8k",
        "arena:tic_tac_toe:random:5,arena:tic_tac_toe:random:9",  # two with one name
        "arena:tic_tac_toe:random:0",
    ],
)
def test_bad_inline_specs_are_one_clear_error(text: str) -> None:
    with pytest.raises(MarsError):
        parse_spec(text)


def test_a_yaml_file_mixes_strings_and_mappings_and_flags_override_it(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(
        "max_tokens: 64\nprompt_style: full\nevals:\n"
        "  - arena:kuhn_poker:cfr:200:10\n"
        "  - {kind: arena, game: mini_hanabi, opponent: self, episodes: 4, seats: first}\n"
        "  - {kind: eval, suite: gsm8k, limit: 3, name: gsm}\n"
    )
    spec = parse_spec(str(path), prompt_style="compact", max_tokens=None)
    assert spec.max_tokens == 64 and spec.prompt_style == "compact"
    assert [item.key for item in spec.evals] == [
        "arena-kuhn_poker-cfr200",
        "arena-mini_hanabi-self",
        "gsm",
    ]
    hanabi = spec.evals[1]
    assert isinstance(hanabi, ArenaItem) and hanabi.seats == "first"
    json_path = tmp_path / "loop.json"
    json_path.write_text(json.dumps(["arena:tic_tac_toe:random:3"]))
    assert parse_spec(str(json_path)).evals[0].key == "arena-tic_tac_toe-random"


def test_unknown_games_opponents_and_suites_fail_before_serving() -> None:
    bad = (
        "arena:chess:random:3",
        "arena:tic_tac_toe:nobody:3",
        "eval:nosuchsuite",
        "arena:tic_tac_toe:mcts:100",  # read as 100 episodes against "mcts", which needs SIMS
    )
    for text in bad:
        with pytest.raises(MarsError):
            check_spec(parse_spec(text))
    with pytest.raises(MarsError):  # MCTS needs perfect information
        check_spec(parse_spec("arena:kuhn_poker:mcts:10:3"))
    check_spec(parse_spec("arena:tic_tac_toe:mcts:10:3,arena:mini_hanabi:self:2"))


def _checkpoint(root: Path, step: int, *, complete: bool, config: dict | None = None) -> Path:
    folder = root / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if complete:
        (folder / "checkpoint.json").write_text(json.dumps({"step": step, "config": config or {}}))
    return folder


def test_only_complete_step_folders_count_in_step_order(tmp_path: Path) -> None:
    run = tmp_path / "train-run"
    root = run / "checkpoints"
    _checkpoint(root, 10, complete=True)
    _checkpoint(root, 2, complete=True)
    _checkpoint(root, 30, complete=False)
    (root / ".step_40.tmp-123").mkdir()
    (root / "step_x").mkdir()
    assert checkpoints_folder(run) == root  # a training run dir is accepted as --watch
    assert [c.step for c in complete_checkpoints(root)] == [2, 10]
    assert not training_finished(root)
    (run / "run.json").write_text(json.dumps({"kind": "train", "status": "running"}))
    assert not training_finished(root)
    (run / "run.json").write_text(json.dumps({"kind": "train", "status": "completed"}))
    assert training_finished(root)


def test_a_dry_run_ends_the_loop_at_once_instead_of_at_its_timeout(tmp_path: Path) -> None:
    train = tmp_path / "train"
    (train / "checkpoints").mkdir(parents=True)
    (train / "run.json").write_text(json.dumps({"kind": "train", "status": "dry_run"}))
    assert training_finished(train / "checkpoints")
    run = RunDir.resolve(out=None, run_dir=tmp_path / "loop", kind="loop", slug="x")
    naps: list[float] = []
    outcome = run_loop(
        train, parse_spec("arena:tic_tac_toe:random:2"), run, timeout_s=3600, sleep=naps.append
    )
    assert naps == [] and outcome.evaluated == []
    assert "dry run" in outcome.stop_reason


def test_settings_come_from_the_checkpoint_unless_the_spec_sets_them(tmp_path: Path) -> None:
    folder = _checkpoint(
        tmp_path, 1, complete=True, config={"prompt_style": "compact", "max_new_tokens": 48}
    )
    checkpoint = Checkpoint(1, folder)
    chosen = resolve_settings(parse_spec("arena:tic_tac_toe:random:2"), checkpoint)
    assert (chosen.prompt_style, chosen.max_tokens) == ("compact", 48)
    spec = parse_spec("arena:tic_tac_toe:random:2", prompt_style="full", max_tokens=99)
    assert (
        resolve_settings(spec, checkpoint).prompt_style,
        resolve_settings(spec, checkpoint).max_tokens,
    ) == ("full", 99)
    bare = Checkpoint(2, _checkpoint(tmp_path, 2, complete=False))
    assert resolve_settings(parse_spec("eval:gsm8k"), bare).prompt_style == "full"


def test_the_curve_keeps_the_last_row_per_step_sorted_and_flat(tmp_path: Path) -> None:
    run = RunDir.resolve(out=None, run_dir=tmp_path / "loop", kind="loop", slug="x")
    seat = {
        "n": 4,
        "win": 0.5,
        "draw": 0.25,
        "loss": 0.25,
        "normalized_return": 62.5,
        "normalized_return_ci": [40.0, 85.0],
        "invalid_rate": 0.0,
    }
    arena = {"kind": "arena", "seats": {"first": seat}, "run_dir": "step_5-a", "error": None}
    suite = {"kind": "eval", "accuracy": 0.4, "ci95": [0.1, 0.7], "n": 5, "run_dir": "step_5-b"}
    run.append({"step": 5, "checkpoint": "/c/5", "evals": {"a": arena, "b": suite}, "error": None})
    run.append({"step": 2, "checkpoint": "/c/2", "evals": {}, "error": "serving failed: x"})
    run.append({"step": 2, "checkpoint": "/c/2", "evals": {"a": arena}, "error": None})
    rows = write_curve(run)
    assert [row["step"] for row in rows] == [2, 5] and rows[0]["error"] is None
    lines = (run.path / "learning_curve.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 5]
    with (run.path / "learning_curve.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert [r["step"] for r in table] == ["2", "5"]
    assert (
        table[1]["a/first/win"] == "0.5" and table[1]["a/first/normalized_return_ci_low"] == "40.0"
    )
    assert table[1]["b/accuracy"] == "0.4" and table[1]["b/ci95_high"] == "0.7"
    assert table[0]["b/accuracy"] == ""  # step 2 had no suite figures


def test_a_cooperative_arena_row_shows_its_score_not_a_loss() -> None:
    from mars.orchestration.loop.api import describe_row

    seat = {"win": 0.0, "draw": 0.0, "loss": 1.0, "normalized_return": 45.0, "mean_return": 1.8}
    row = {
        "step": 3,
        "evals": {
            "arena:mini_hanabi:self:2": {
                "kind": "arena",
                "game": "mini_hanabi",
                "seats": {"first": seat},
            },
            "arena:tic_tac_toe:random:2": {
                "kind": "arena",
                "game": "tic_tac_toe",
                "seats": {"first": seat},
            },
        },
    }
    line = describe_row(row)
    assert "arena:mini_hanabi:self:2 [first score 1.80]" in line
    assert "arena:tic_tac_toe:random:2 [first W/D/L 0.00/0.00/1.00 norm 45.0]" in line


def test_a_cooperative_arena_keeps_its_score_in_the_curve_csv_not_a_loss() -> None:
    from mars.orchestration.loop.curve import flatten_row

    seat = {"win": 0.0, "draw": 0.0, "loss": 1.0, "normalized_return": 45.0, "mean_return": 1.8}
    row = {
        "step": 3,
        "evals": {
            "hanabi": {"kind": "arena", "game": "mini_hanabi", "seats": {"first": seat}},
            "ttt": {"kind": "arena", "game": "tic_tac_toe", "seats": {"first": seat}},
        },
    }
    flat = flatten_row(row)
    assert flat["hanabi/first/score"] == 1.8
    assert "hanabi/first/loss" not in flat and "hanabi/first/win" not in flat
    assert flat["ttt/first/loss"] == 1.0 and "ttt/first/score" not in flat


def test_games_are_read_as_the_checkpoints_training_read_them(tmp_path: Path) -> None:
    """A checkpoint trained with strict parsing is played and measured strictly; one trained
    leniently (or that does not say) gets no flag, each command's lenient default."""
    from mars.orchestration.loop.commands import sub_command

    spec = parse_spec("arena:kuhn_poker:random:2,exploit:kuhn_poker:4,eval:gsm8k")
    strict, lenient = (
        Checkpoint(step, _checkpoint(tmp_path, step, complete=True, config={"parse_mode": mode}))
        for step, mode in ((1, "strict"), (2, "lenient"))
    )
    for checkpoint, flag in ((strict, ["--parse-mode", "strict"]), (lenient, [])):
        settings = resolve_settings(spec, checkpoint)
        arena, exploit, suite = (
            sub_command(item, spec, settings, base_url="http://127.0.0.1:1/v1", model="m",
                        run_dir=tmp_path / "r")
            for item in spec.evals
        )  # fmt: skip
        for command in (arena, exploit):
            given = [a for a in command.argv if a == "--parse-mode"]
            assert len(given) == len(flag) // 2
            if flag:
                at = command.argv.index("--parse-mode")
                assert command.argv[at : at + 2] == flag
        assert "--parse-mode" not in suite.argv  # suites have no game replies to read
