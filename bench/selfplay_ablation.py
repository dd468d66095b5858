"""The paper in miniature: estimators and training modes side by side on the CPU trainer.

One generalist run per (arm, seed): Kuhn Poker, Mini Hanabi and Tic-Tac-Toe in one mix (a third of
each step's games each), the same budget (steps x games per step, learning rate, temperature) and
the same starting model for every arm:

- self-play with `marshal`, `marshal_reference`, `no_turn_level`, `no_agent_norm`, `grpo`;
- `vs_random`: `marshal` trained against a fixed `random` opponent (the MARSHAL code's second
  mode; the policy's seat alternates).

The starting model is the format-only tiny model of `bench/recipes/selfplay-generalist.yaml` (legal
replies; uniformly random poker and Hanabi moves with the state restated before the answer;
Tic-Tac-Toe's last-listed copying), built and cached on first use. Each run is a `mars train
--backend local` process (`--parallel` at a time, one torch thread each); its last checkpoint, and
the starting model, are then measured in another process, every figure sampled at the training
temperature (the policy that was trained):

- Kuhn: exact exploitability of the model's policy (`K` replies per information state, bootstrap
  95% interval; `train_backend.local.exploitability`);
- Mini Hanabi: the mean self-play score over `--hanabi-episodes` games (bootstrap 95% interval);
- Tic-Tac-Toe: non-loss against `random` and `mcts:100` from each seat (Wilson 95% intervals).

Targets (the last line, JSON): `marshal` self-play at most halves Kuhn exploitability from the
starting model in every seed (`value` = the worst seed's end / start ratio, target <= 0.5), and
raises the Mini Hanabi self-play score with non-overlapping 95% intervals (seeds pooled); with at
most 5 minutes of training per run.

Run: .venv/bin/python bench/selfplay_ablation.py [--steps 40] [--games-per-step 48]
     [--seeds 0,1,2] [--arms marshal,...] [--parallel 2] [--out runs/bench-ablation]
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

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.stats import bootstrap_mean_ci, wilson_ci

GAMES = ("kuhn_poker", "mini_hanabi", "tic_tac_toe")
ARMS: dict[str, dict[str, str]] = {
    "marshal": {"estimator": "marshal"},
    "marshal_reference": {"estimator": "marshal_reference"},
    "no_turn_level": {"estimator": "no_turn_level"},
    "no_agent_norm": {"estimator": "no_agent_norm"},
    "grpo": {"estimator": "grpo"},
    "vs_random": {"estimator": "marshal", "opponent": "random"},
}
TTT_OPPONENTS = ("random", "mcts:100")
SEATS = ("first", "second")
TARGET_RATIO = 0.5
TARGET_MINUTES = 5.0
REPO = Path(__file__).resolve().parents[1]


RECIPE = REPO / "bench" / "recipes" / "selfplay-generalist.yaml"


def starting_model() -> str:
    from train_backend.pretrain import ensure_pretrained_tiny_model, load_recipe

    return str(ensure_pretrained_tiny_model(load_recipe(RECIPE), name=RECIPE.stem))


def train_run(model: str, arm: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    run_dir = root / f"{arm}-seed{seed}"
    config = {
        "warmup_steps": args.warmup,
        "save_every": args.steps,
        "temperature": args.temperature,
        "kl_coef": args.kl_coef,
        "max_new_tokens": args.max_new_tokens,
        "estimator": ARMS[arm]["estimator"],
        "opponent": ARMS[arm].get("opponent"),
    }
    config_file = root / f"{arm}-seed{seed}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    command = [
        sys.executable, "-m", "harness", "train",
        "--model", model,
        "--games", ",".join(GAMES),
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
        raise RuntimeError(f"{arm} seed {seed} failed:\n{result.stderr[-2000:]}")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_s = sum(m["seconds_per_step"] for m in metrics)
    checkpoint = run_dir / "checkpoints" / f"step_{args.steps}"
    figures = measure_in_child(checkpoint, args, run_dir)
    print(f"  {arm} seed {seed}: {wall / 60:.1f} min ({train_s / 60:.1f} min training)")
    return {"arm": arm, "seed": seed, "train_s": train_s, "metrics": metrics, **figures}


def measure_in_child(model: Path | str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """`measure` in a child process (one torch thread, its own memory); returns its figures."""
    command = [
        sys.executable, str(Path(__file__).resolve()), "--measure", str(model),
        "--out", str(out), "--temperature", str(args.temperature),
        "--max-new-tokens", str(args.max_new_tokens), "--kuhn-samples", str(args.kuhn_samples),
        "--hanabi-episodes", str(args.hanabi_episodes), "--ttt-episodes", str(args.ttt_episodes),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"measuring {model} failed:\n{result.stderr[-2000:]}")
    return json.loads((out / "figures.json").read_text())


def measure(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Kuhn exploitability, Mini Hanabi self-play score, Tic-Tac-Toe non-loss per seat."""
    import torch

    from games.engine import EpisodeOptions
    from games.spec import get_game
    from train_backend.local.batcher import Sampling
    from train_backend.local.evaluate import eval_pairs, evaluate
    from train_backend.local.exploitability import policy_exploitability
    from train_backend.local.policy import load_policy
    from train_backend.local.rollout import make_responder

    torch.set_num_threads(1)
    policy = load_policy(model)
    sampling = Sampling(temperature=args.temperature)
    kuhn = policy_exploitability(
        policy, get_game("kuhn_poker"), samples=args.kuhn_samples, sampling=sampling,
        prompt_style="compact", max_new_tokens=args.max_new_tokens,
    )  # fmt: skip
    options = EpisodeOptions(prompt_style="compact")

    def play(game: str, opponents: list[str], episodes: int) -> list[dict[str, Any]]:
        responder = make_responder(
            policy, sampling, generator=torch.Generator().manual_seed(0),
            max_new_tokens=args.max_new_tokens, max_context_tokens=2048, keep_tokens=False,
        )  # fmt: skip
        pairs = eval_pairs([get_game(game)], {game: opponents})
        _, records = asyncio.run(
            evaluate(responder, pairs, episodes=episodes, options=options, step=0)
        )
        return records

    hanabi = [r["returns"][0] for r in play("mini_hanabi", ["self"], args.hanabi_episodes)]
    ttt: dict[str, dict[str, list[int]]] = {}
    for record in play("tic_tac_toe", list(TTT_OPPONENTS), args.ttt_episodes):
        index = SEATS.index(record["seat"])
        cell = ttt.setdefault(f"{record['opponent']}/{record['seat']}", {"n": 0, "non_loss": 0})
        cell["n"] += 1
        cell["non_loss"] += record["outcomes"][index] != "loss"
    return {
        "kuhn": {
            "exploitability": kuhn["exploitability"],
            "ci95": list(kuhn["ci95"]),
            "invalid_rate": kuhn["invalid_rate"],
        },
        "hanabi": hanabi,
        "ttt": ttt,
    }


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    low, high = bootstrap_mean_ci(values)
    return float(np.mean(values)) if values else 0.0, low, high


def print_tables(start: dict[str, Any], runs: list[dict[str, Any]], arms: list[str]) -> None:
    print("\nKuhn exploitability (sampled policy; 95% bootstrap interval), per seed:")
    print(f"  start {start['kuhn']['exploitability']:.3f} {_interval(start['kuhn']['ci95'])}")
    for arm in arms:
        cells = [
            f"s{r['seed']} {r['kuhn']['exploitability']:.3f} {_interval(r['kuhn']['ci95'])}"
            for r in runs
            if r["arm"] == arm
        ]
        print(f"  {arm:<18}" + "   ".join(cells))
    print("\nMini Hanabi self-play score (mean [95% bootstrap], seeds pooled):")
    rows = {"start": start["hanabi"]}
    rows.update({arm: [v for r in runs if r["arm"] == arm for v in r["hanabi"]] for arm in arms})
    for name, values in rows.items():
        mean, low, high = mean_ci(values)
        print(f"  {name:<18}{mean:.3f} [{low:.3f}, {high:.3f}]  n={len(values)}")
    print("\nTic-Tac-Toe non-loss (seeds pooled; Wilson 95%):")
    keys = [f"{opponent}/{seat}" for opponent in TTT_OPPONENTS for seat in SEATS]
    print(f"  {'model':<18}" + "".join(f"{key:<24}" for key in keys))
    tables = {"start": [start]} | {arm: [r for r in runs if r["arm"] == arm] for arm in arms}
    for name, members in tables.items():
        cells = []
        for key in keys:
            n = sum(m["ttt"].get(key, {}).get("n", 0) for m in members)
            wins = sum(m["ttt"].get(key, {}).get("non_loss", 0) for m in members)
            low, high = wilson_ci(wins, n)
            cells.append(f"{wins / n if n else 0:.2f} [{low:.2f},{high:.2f}]".ljust(24))
        print(f"  {name:<18}" + "".join(cells))


def _interval(ci: list[float]) -> str:
    return f"[{ci[0]:.3f},{ci[1]:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--games-per-step", type=int, default=48)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--marshal-seeds", help="seeds of the marshal arm (default: --seeds)")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--kuhn-samples", type=int, default=64)
    parser.add_argument("--hanabi-episodes", type=int, default=200)
    parser.add_argument("--ttt-episodes", type=int, default=30)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-selfplay-ablation"))
    parser.add_argument("--model", help="starting model folder (default: the recipe's build)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: measure one model
    args = parser.parse_args()
    if args.measure:
        figures = measure(args.measure, args)
        (args.out / "figures.json").write_text(json.dumps(figures))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = args.arms.split(",")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        sys.exit(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    root = args.out / time.strftime("%Y%m%d-%H%M%S")
    root.mkdir()

    started = time.perf_counter()
    model = args.model or starting_model()
    print(f"starting model: {model}")
    print(
        f"budget per run: {args.steps} steps x {args.games_per_step} games of "
        f"{','.join(GAMES)}, lr {args.lr}, warm-up {args.warmup}, KL {args.kl_coef}, "
        f"temperature {args.temperature}; seeds {seeds}; {args.parallel} runs at a time"
    )
    start_dir = root / "start"
    start_dir.mkdir()
    marshal_seeds = [int(s) for s in (args.marshal_seeds or args.seeds).split(",")]
    jobs = [(arm, seed) for arm in arms for seed in (marshal_seeds if arm == "marshal" else seeds)]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        start_job = pool.submit(measure_in_child, model, args, start_dir)
        runs = list(pool.map(lambda job: train_run(model, job[0], job[1], args, root), jobs))
        start = start_job.result()
    print_tables(start, runs, arms)
    print(f"\nbench wall time {(time.perf_counter() - started) / 60:.1f} min; runs in {root}")

    marshal = [r for r in runs if r["arm"] == "marshal"]
    start_exploit = start["kuhn"]["exploitability"]
    ratios = [r["kuhn"]["exploitability"] / start_exploit for r in marshal]
    worst = max(ratios, default=float("inf"))
    _, _, start_high = mean_ci(start["hanabi"])
    hanabi_mean, hanabi_low, _ = mean_ci([v for r in marshal for v in r["hanabi"]])
    minutes = max((r["train_s"] for r in runs), default=0.0) / 60
    kuhn_met = worst <= TARGET_RATIO
    hanabi_met = hanabi_low > start_high
    result = {
        "metric": "marshal_kuhn_exploitability_end_over_start_worst_seed",
        "value": round(worst, 4),
        "target": TARGET_RATIO,
        "met": kuhn_met and hanabi_met and minutes <= TARGET_MINUTES,
        "kuhn_met": kuhn_met,
        "hanabi_met": hanabi_met,
        "kuhn_start": round(start_exploit, 4),
        "kuhn_marshal_per_seed": [round(r["kuhn"]["exploitability"], 4) for r in marshal],
        "hanabi_start_mean_ci": [round(v, 4) for v in mean_ci(start["hanabi"])],
        "hanabi_marshal_mean_low": [round(hanabi_mean, 4), round(hanabi_low, 4)],
        "train_minutes_per_run_max": round(minutes, 2),
        "minutes_budget": TARGET_MINUTES,
        "steps": args.steps,
        "games_per_step": args.games_per_step,
        "learning_rate": args.lr,
        "temperature": args.temperature,
        "seeds": seeds,
        "marshal_seeds": marshal_seeds,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
