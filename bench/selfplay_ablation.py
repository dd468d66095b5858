"""Self-play ablation on Tic-Tac-Toe with the embedded CPU trainer: estimators side by side.

Same budget (steps x games per step), same seeds, same starting model for every estimator:
`marshal` (turn-level return, per-seat normalisation), `no_turn_level`, `no_agent_norm` and
`grpo`. The starting model is the format-pre-trained tiny model
(`train_backend.pretrain.ensure_pretrained_tiny_model()`, built and cached on first use); the
plain tiny model never writes a legal move, so self-play would have nothing to learn from.

Each (estimator, seed) is one `mars train --backend local` run in its own process (`--parallel`
at a time, one torch thread each). Its last checkpoint then plays `random` and `mcts:100` from
both seats, in another process, twice: greedy (what the trainer's own evaluation does) and sampled
at temperature 1.0 (seeded), since a small policy's greedy choice can be degenerate
while its sampled play is what training improves. The tables pool the seeds (Wilson 95% intervals
over all their games); the starting model is evaluated the same way for reference. The last line
is the JSON result for the target: marshal at >= 90% non-loss against `random` from both seats
(greedy, as the trainer evaluates; the sampled figure rides along) within 15 minutes of CPU
training per run.

Self-play temperature (`--temperature`, default 1.0): a near-deterministic policy playing itself
replays the same game in every slot of a step; the returns then differ only by a turn's place in
the game, never by the move chosen, so there is nothing to learn about play. A higher temperature
(1.5) makes the games differ. `--model DIR` starts from another model, e.g. the Tic-Tac-Toe
specialist of `bench/recipes/tactics-ttt.yaml` (`mars tiny-model pretrain --recipe ...`), which
blocks one-move threats some of the time (docs/training.md has both measurements).

Run: .venv/bin/python bench/selfplay_ablation.py [--steps 40] [--games-per-step 32]
     [--seeds 0,1,2] [--eval-episodes 50] [--parallel 2] [--out runs/bench-ablation]
     [--model DIR] [--temperature 1.0] [--lr 1e-3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.stats import wilson_ci

ESTIMATORS = ("marshal", "no_turn_level", "no_agent_norm", "grpo")
EVAL_MODES = ("greedy", "sampled")
OPPONENTS = ("random", "mcts:100")
SEATS = ("first", "second")
TARGET_NON_LOSS = 0.9
TARGET_MINUTES = 15.0
REPO = Path(__file__).resolve().parents[1]


def starting_model() -> tuple[str, str]:
    """The format-pre-trained tiny model when the pre-training module exists, else the plain one."""
    try:
        from train_backend.pretrain import ensure_pretrained_tiny_model
    except ImportError:
        from harness.tiny_model import ensure_tiny_model

        return str(ensure_tiny_model()), "plain tiny model (no train_backend.pretrain)"
    return str(ensure_pretrained_tiny_model()), "format-pre-trained tiny model"


def train_run(
    model: str, estimator: str, seed: int, args: argparse.Namespace, root: Path
) -> dict[str, Any]:
    run_dir = root / f"{estimator}-seed{seed}"
    config = {
        "warmup_steps": args.warmup,
        "save_every": args.steps,
        "temperature": args.temperature,
    }
    config_file = root / f"{estimator}-seed{seed}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    command = [
        sys.executable, "-m", "harness", "train",
        "--model", model,
        "--games", "tic_tac_toe",
        "--estimator", estimator,
        "--seed", str(seed),
        "--steps", str(args.steps),
        "--games-per-step", str(args.games_per_step),
        "--lr", str(args.lr),
        "--eval-every", "0",
        "--config", str(config_file),
        "--run-dir", str(run_dir),
        "--threads", "1",
        "--quiet",
    ]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{estimator} seed {seed} failed:\n{result.stderr[-2000:]}")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_s = sum(m["seconds_per_step"] for m in metrics)
    checkpoint = run_dir / "checkpoints" / f"step_{args.steps}"
    evals = evaluate_in_process(checkpoint, args.eval_episodes, run_dir)
    print(f"  {estimator} seed {seed}: {wall / 60:.1f} min ({train_s / 60:.1f} min training)")
    return {
        "estimator": estimator,
        "seed": seed,
        "wall_s": wall,
        "train_s": train_s,
        "final": metrics[-1],
        "first": metrics[0],
        "records": evals,
    }


def evaluate_in_process(model: Path | str, episodes: int, out: Path) -> dict[str, Path]:
    """Run `evaluate_model` in a child process; returns {"greedy": path, "sampled": path}."""
    command = [
        sys.executable, str(Path(__file__).resolve()), "--evaluate", str(model),
        "--eval-episodes", str(episodes), "--out", str(out),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"evaluating {model} failed:\n{result.stderr[-2000:]}")
    return {mode: out / f"eval-{mode}.jsonl" for mode in EVAL_MODES}


def evaluate_model(model: str, episodes: int, out: Path) -> None:
    """Both seats against each opponent, greedy and sampled, through the trainer's arena code."""
    import torch

    from games.engine import EpisodeOptions
    from games.spec import get_game
    from train_backend.local.batcher import GREEDY, Sampling
    from train_backend.local.evaluate import eval_pairs, evaluate
    from train_backend.local.policy import load_policy
    from train_backend.local.rollout import make_responder

    torch.set_num_threads(1)
    policy = load_policy(model)
    pairs = eval_pairs([get_game("tic_tac_toe")], {"tic_tac_toe": list(OPPONENTS)})
    for mode, sampling in (("greedy", GREEDY), ("sampled", Sampling(temperature=1.0))):
        responder = make_responder(
            policy, sampling, generator=torch.Generator().manual_seed(0), max_new_tokens=48,
            max_context_tokens=2048, keep_tokens=False,
        )  # fmt: skip
        _, records = asyncio.run(
            evaluate(
                responder,
                pairs,
                episodes=episodes,
                options=EpisodeOptions(prompt_style="compact"),
                step=0,
            )
        )
        path = out / f"eval-{mode}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))


def tally(paths: list[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (opponent, seat): outcome counts and invalid replies pooled over the given eval files."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            seat = record["seat"]
            index = SEATS.index(seat)
            cell = cells.setdefault(
                (record["opponent"], seat),
                {"n": 0, "win": 0, "draw": 0, "loss": 0, "turns": 0, "invalid": 0},
            )
            cell["n"] += 1
            cell[record["outcomes"][index]] += 1
            cell["turns"] += record["model_turns"][index]
            cell["invalid"] += record["invalid_turns"][index]
    return cells


def fmt(count: int, n: int) -> str:
    low, high = wilson_ci(count, n)
    return f"{count / n:.2f} [{low:.2f},{high:.2f}]"


def print_table(rows: dict[str, dict[tuple[str, str], dict[str, Any]]]) -> None:
    header = f"{'model':<16}{'opponent':<10}{'seat':<8}{'n':>5}  " + "  ".join(
        f"{name:<17}" for name in ("win", "draw", "loss", "non-loss")
    )
    print(header + "  invalid")
    for name, cells in rows.items():
        for opponent in OPPONENTS:
            for seat in SEATS:
                cell = cells.get((opponent, seat))
                if not cell:
                    continue
                n = cell["n"]
                invalid = cell["invalid"] / cell["turns"] if cell["turns"] else 0.0
                print(
                    f"{name:<16}{opponent:<10}{seat:<8}{n:>5}  "
                    f"{fmt(cell['win'], n):<17}  {fmt(cell['draw'], n):<17}  "
                    f"{fmt(cell['loss'], n):<17}  {fmt(n - cell['loss'], n):<17}  {invalid:.3f}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--games-per-step", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=1.0, help="self-play sampling")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-selfplay-ablation"))
    parser.add_argument("--model", help="starting model folder (default: pre-trained tiny model)")
    parser.add_argument("--evaluate", help=argparse.SUPPRESS)  # internal: evaluate one model
    args = parser.parse_args()
    if args.evaluate:
        evaluate_model(args.evaluate, args.eval_episodes, args.out)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    estimators = args.estimators.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    root = args.out / time.strftime("%Y%m%d-%H%M%S")
    root.mkdir()

    started = time.perf_counter()
    model, model_note = (args.model, f"given: {args.model}") if args.model else starting_model()
    print(f"starting model: {model} ({model_note})")
    print(
        f"budget per run: {args.steps} steps x {args.games_per_step} games, lr {args.lr}, "
        f"warm-up {args.warmup}, temperature {args.temperature}; seeds {seeds}; "
        f"{args.eval_episodes} eval games per seat and "
        f"opponent, greedy and sampled; {args.parallel} runs at a time, 1 thread each"
    )
    start_dir = root / "start"
    start_dir.mkdir()
    jobs = [(estimator, seed) for estimator in estimators for seed in seeds]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        start_eval = pool.submit(evaluate_in_process, model, args.eval_episodes, start_dir)
        runs = list(pool.map(lambda job: train_run(model, job[0], job[1], args, root), jobs))
        start_records = start_eval.result()

    tables = {}
    for mode in EVAL_MODES:
        rows = {"start": tally([start_records[mode]])}
        for estimator in estimators:
            rows[estimator] = tally(
                [r["records"][mode] for r in runs if r["estimator"] == estimator]
            )
        tables[mode] = rows
        print(f"\n{mode} play, seeds pooled (rate [Wilson 95%]):")
        print_table(rows)
    print()
    print(f"{'estimator':<16}{'train min/run':>14}{'invalid@1':>11}{'invalid@end':>12}")
    for estimator in estimators:
        mine = [r for r in runs if r["estimator"] == estimator]
        minutes = sum(r["train_s"] for r in mine) / len(mine) / 60
        first = sum(r["first"]["invalid_rate"] for r in mine) / len(mine)
        last = sum(r["final"]["invalid_rate"] for r in mine) / len(mine)
        print(f"{estimator:<16}{minutes:>14.1f}{first:>11.3f}{last:>12.3f}")
    print(f"\nbench wall time {(time.perf_counter() - started) / 60:.1f} min; runs in {root}")

    def worst_seat_non_loss(mode: str) -> float:
        cells = tables[mode].get("marshal", {})
        rates = [
            (cells[key]["n"] - cells[key]["loss"]) / cells[key]["n"]
            for key in (("random", seat) for seat in SEATS)
            if key in cells
        ]
        return min(rates) if rates else 0.0

    marshal_runs = [r for r in runs if r["estimator"] == "marshal"]
    minutes = max((r["train_s"] for r in marshal_runs), default=0.0) / 60
    value = worst_seat_non_loss("greedy")
    result = {
        "metric": "marshal_non_loss_vs_random_min_over_seats",
        "value": round(value, 4),
        "target": TARGET_NON_LOSS,
        "met": value >= TARGET_NON_LOSS and minutes <= TARGET_MINUTES,
        "sampled_value": round(worst_seat_non_loss("sampled"), 4),
        "train_minutes_per_run": round(minutes, 1),
        "minutes_budget": TARGET_MINUTES,
        "steps": args.steps,
        "games_per_step": args.games_per_step,
        "seeds": seeds,
        "learning_rate": args.lr,
        "temperature": args.temperature,
        "starting_model": model_note,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
