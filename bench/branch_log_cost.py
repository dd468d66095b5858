"""What the branch log (`core.branch_log`) costs a tree-sampled training step, in time and disk.

The demo's training (`mars demo`: AT-GRPO on Kuhn Poker, K = 4 with every legal action among
the branches, four PPO epochs, from the demo's format-pre-trained start), run by the CPU trainer
for `--steps` steps with `--games` games a step and one torch thread. In the same run, every call
that builds, summarises or writes the log (`LocalTrainer.branch_lines`,
`branch_log.collapse_signals`, `branch_log.write_step`) is timed, so the figure is exact however
noisy the machine: the log's seconds over the rest of the step's seconds (median over steps).
Disk: the `branches/` folder over the rest of the run directory, with the step's checkpoint
(the demo saves one) and without checkpoints.

Targets (issue 41): at most 10% of a tree step's wall time and 20% of the run directory's size.

Run: .venv/bin/python bench/branch_log_cost.py [--steps 6] [--games 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, has_names, report, run_dry, start_model

TIME_TARGET = 0.10
SIZE_TARGET = 0.20


def _size(path: Path, skip: str | None = None) -> int:
    return sum(
        f.stat().st_size
        for f in path.rglob("*")
        if f.is_file() and not (skip and skip in f.relative_to(path).parts)
    )


def train_config(model: str, args: argparse.Namespace) -> Any:
    """The demo's training on Kuhn Poker, sized by the bench's flags."""
    from mars.orchestration.demo import DEMO_TRAIN
    from train_backend.config import TrainConfig

    return TrainConfig.for_local(
        **(DEMO_TRAIN | {"model": model}),
        games=["kuhn_poker"],
        steps=args.steps,
        games_per_step=args.games,
        save_every=args.steps,
        eval_every=0,
    )


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The training config as the CPU trainer checks it, and the functions the bench times."""
    from core import branch_log
    from train_backend.local.trainer import LocalTrainer, check_config
    from train_backend.pretrain.build import SELFPLAY_START_NAME

    config = dry.config(lambda: train_config(start_model(dry, SELFPLAY_START_NAME), args))
    dry.count("game", len(check_config(config)))
    has_names(dry, LocalTrainer, ["branch_lines"], "timed function")
    has_names(dry, branch_log, ["collapse_signals", "write_step", "BRANCHES_DIR"], "timed function")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--games", type=int, default=32)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    import torch

    from core import branch_log
    from core.runstore import RunDir
    from train_backend.local import trainer as local_trainer
    from train_backend.pretrain.build import (
        SELFPLAY_START,
        SELFPLAY_START_NAME,
        ensure_pretrained_tiny_model,
    )

    torch.set_num_threads(1)
    # Per step: the log's seconds inside the step's timing (lines, signals) and after it (the
    # file is written once the step's metrics line, `seconds_per_step` included, is made).
    inside: dict[int, float] = {}
    after: dict[int, float] = {}
    current = {"step": 0}

    def timed(function: Callable[..., Any], into: dict[int, float]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                step = current["step"]
                into[step] = into.get(step, 0.0) + time.perf_counter() - started

        return wrapper

    original_lines = local_trainer.LocalTrainer.branch_lines

    def branch_lines(self: Any, step: int, *rest: Any) -> Any:
        current["step"] = step
        return timed(original_lines, inside)(self, step, *rest)

    local_trainer.LocalTrainer.branch_lines = branch_lines  # type: ignore[method-assign]
    branch_log.collapse_signals = timed(branch_log.collapse_signals, inside)
    branch_log.write_step = timed(branch_log.write_step, after)

    start = ensure_pretrained_tiny_model(SELFPLAY_START, name=SELFPLAY_START_NAME)
    config = train_config(str(start), args)
    with tempfile.TemporaryDirectory() as folder:
        run = RunDir.resolve(out=None, run_dir=Path(folder) / "run", kind="train", slug="bench")
        trainer = local_trainer.LocalTrainer(config, run, log=print)
        trainer.load()
        trainer.train()
        rows = trainer.run.path / "metrics.jsonl"
        seconds = {m["step"]: m["seconds_per_step"] for m in map(json.loads, rows.open())}
        spent = {s: inside[s] + after.get(s, 0.0) for s in inside}
        fractions = [spent[s] / (seconds[s] - inside[s]) for s in sorted(seconds) if s in spent]
        branches = _size(run.path / branch_log.BRANCHES_DIR)
        total = _size(run.path)
        without_checkpoints = _size(run.path, skip="checkpoints")
    time_fraction = statistics.median(fractions)
    size_fraction = branches / (total - branches)
    print(
        f"branch log: {1000 * statistics.median(spent.values()):.1f} ms a step (median), "
        f"{time_fraction:.2%} of the rest of the step; {branches / 1024:.0f} KB over "
        f"{args.steps} steps = {size_fraction:.2%} of the rest of the run directory "
        f"({branches / (without_checkpoints - branches):.0%} without its checkpoint)"
    )
    report(
        "branch_log_step_time_fraction",
        time_fraction,
        TIME_TARGET,
        size_fraction=round(size_fraction, 4),
        size_target=SIZE_TARGET,
        size_met=size_fraction <= SIZE_TARGET,
        size_fraction_without_checkpoints=round(branches / (without_checkpoints - branches), 4),
        per_step_fractions=[round(f, 4) for f in fractions],
        steps=args.steps,
        games_per_step=args.games,
    )


if __name__ == "__main__":
    main()
