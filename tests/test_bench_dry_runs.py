"""Every bench script's `--dry-run` passes: the commands and configs a bench would run go through
the real parsers and validators, so a renamed option or a refused setting breaks a test, not the
next person's hour-long bench run.

The scripts run in this process (`runpy`, as `python bench/X.py --dry-run` would run them):
a dry run starts no process, server or model, and the whole file costs a few seconds where a
subprocess per bench would cost an interpreter start and the imports each.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
BENCHES = sorted(BENCH.glob("[!_]*.py"))  # what `make bench` runs: a new bench is covered here
# Options that pick one of a few fixed variants: the other variants' dry runs too.
VARIANTS = {
    "mas_training.py": [["--domain", "plan"]],
    "mas_rollout.py": [["--workflow", "plan_tool"]],
}
RUNS = [(path, []) for path in BENCHES] + [
    (BENCH / name, args) for name, variants in VARIANTS.items() for args in variants
]


def dry_run(monkeypatch: pytest.MonkeyPatch, path: Path, *args: str) -> int | str:
    """The script run as `python bench/NAME.py --dry-run ARGS`; its exit code (a refusal's
    message when it exits with one)."""
    monkeypatch.setattr(sys, "argv", [str(path), "--dry-run", *args])
    # The script's folder first, as Python puts it for a script; the checkout for `bench.*`.
    monkeypatch.setattr(sys, "path", [str(BENCH), str(REPO), *sys.path])
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return 0 if exc.code is None else exc.code
    return 0


@pytest.mark.parametrize(
    ("path", "args"), RUNS, ids=lambda item: item.name if isinstance(item, Path) else " ".join(item)
)
def test_a_bench_dry_run_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path, args: list[str]
) -> None:
    assert dry_run(monkeypatch, path, *args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and lines[-1].startswith("dry run: ") and "checked" in lines[-1]


def test_the_mas_training_dry_run_checks_all_three_arms(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each arm's workflow options against its own workflow (`single` refused the reasoner +
    tool workflow's `rounds` and `code_seconds` once), one seed each."""
    assert dry_run(monkeypatch, BENCH / "mas_training.py", "--seeds", "0") == 0
    assert "3 workflow configs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "args", "named"),
    [
        ("mas_training.py", ["--arms", "single,mas_sharded"], "mas_sharded"),
        ("selfplay_ablation.py", ["--games", "kuhn_poker,chess"], "chess"),
        ("tree_step_cost.py", ["--game", "go"], "go"),
        ("card_separation.py", ["--lr", "-1"], "learning_rate"),
    ],
)
def test_a_dry_run_refuses_a_bad_value_in_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, args: list[str], named: str
) -> None:
    refusal = dry_run(monkeypatch, BENCH / name, *args)
    assert isinstance(refusal, str), refusal  # exits non-zero with its message
    assert refusal.startswith("dry run refused: ") and named in refusal and "\n" not in refusal


@pytest.mark.parametrize("recipe", sorted((BENCH / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_a_bench_recipe_loads_and_its_command_parses(recipe: Path) -> None:
    from mars.command_check import check_command_line
    from train_backend.pretrain.build import load_recipe

    load_recipe(recipe)
    check_command_line(["tiny-model", "pretrain", "--recipe", str(recipe)])
