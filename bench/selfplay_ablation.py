"""The paper in miniature: estimators and training modes side by side on the CPU trainer.

One generalist run per (arm, seed): Kuhn Poker, Mini Hanabi and Tic-Tac-Toe in one mix (a third of
each step's games each), the same budget (steps x games per step, learning rate, temperature) and
the same starting model for every arm:

- self-play with `marshal`, `marshal_reference`, `no_turn_level`, `no_agent_norm`, `grpo`;
- `vs_random`: `marshal` trained against a fixed `random` opponent (the MARSHAL code's second
  mode; the policy's seat alternates).
- `at_grpo`: tree sampling, K = 2 all-actions branches per policy turn, groups of one state,
  mean-centred (docs/training.md, "Tree sampling"); `at_grpo_kl` adds the KL magnet (0.2) to
  the starting model, whose moves are uniformly random; `at_grpo_epochs`: K = 4, mean-std
  groups, the KL magnet and four PPO epochs per step; `at_grpo_pool`: `at_grpo_epochs` against
  a pool of the policy's past snapshots (a snapshot every 5 steps, fictitious self-play);
  `at_grpo_explore`: `at_grpo_epochs` with own-move exploration (`tree.explore` 0.3);
  `at_grpo_state_std`: `at_grpo_epochs` with the state-spread divisor (`scale: state_std`);
  `at_grpo_keep_invalid`: `at_grpo_state_std` whose all-actions rewrite leaves invalid samples
  as branches (`tree.keep_invalid`);
- `state_groups`: `marshal` plus information-state groups (`state_weight` 1);
- `marshal_kl`, `marshal_entropy`: `marshal` with the KL magnet, or an entropy bonus of 0.01.

Every arm's config overrides sit on top of the shared budget (`ARMS`); `--arms` picks arms and
`--games kuhn_poker` trains on Kuhn alone.

The starting model is the format-only tiny model of `bench/recipes/selfplay-generalist.yaml` (legal
replies; uniformly random poker and Hanabi moves with the state restated before the answer;
Tic-Tac-Toe's last-listed copying), built and cached on first use. Each run is a `mars train
--trainer local` process (`--parallel` at a time, one torch thread each); its last checkpoint, and
the starting model, are then measured in another process, every figure sampled at the training
temperature (the policy that was trained):

- Kuhn: exact exploitability of the model's policy (`K` replies per information state, bootstrap
  95% interval; `train_backend.local.exploitability`);
- Mini Hanabi: the mean self-play score over `--hanabi-episodes` games (bootstrap 95% interval);
- Tic-Tac-Toe: non-loss against `random` and `mcts:100` from each seat (Wilson 95% intervals).

Target (the last line, JSON): the best arm ends at Kuhn exploitability <= 0.15 in every seed
(issue 22; uniform play is 0.458, always-bet 0.333). It also says, per arm, whether the Mini
Hanabi self-play score's 95% t interval over seeds lies above the start's interval
(`targets`, as `bench/ablation_table.py` reports it). A mix without Kuhn
(`--games mini_hanabi,tic_tac_toe`) ends instead with the Tic-Tac-Toe target: the best arm's
non-loss against `random` (seeds pooled) not below the start's in either seat (not
significantly: a one-sided two-proportion z-test at 0.05; the point margins are printed too).

`--branch-rate p` sets `tree.branch_rate` of every tree arm: only a share p of the main lines'
turns branch, which keeps tree sampling affordable in the longer games (docs/training.md).
`bench/ablation_table.py` turns the per-run figures into the all-arms table over seeds.

Run: .venv/bin/python bench/selfplay_ablation.py [--steps 40] [--games-per-step 48]
     [--seeds 0,1,2] [--arms marshal,...] [--games kuhn_poker] [--branch-rate 1.0]
     [--parallel 2] [--out runs/bench-ablation]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, game_specs, int_list, run_dry, start_model
from core.errors import MarsError
from core.stats import bootstrap_mean_ci, wilson_ci

GAMES = ("kuhn_poker", "mini_hanabi", "tic_tac_toe")
# Each arm is a set of config overrides on top of the shared budget (see train_run).
AT_GRPO = {
    "estimator": "at_grpo",
    "estimator_options": {"scale": "mean"},
    "tree": {"branches": 2, "all_actions": True},
}
ARMS: dict[str, dict[str, Any]] = {
    "marshal": {"estimator": "marshal"},
    "marshal_reference": {"estimator": "marshal_reference"},
    "no_turn_level": {"estimator": "no_turn_level"},
    "no_agent_norm": {"estimator": "no_agent_norm"},
    "grpo": {"estimator": "grpo"},
    "vs_random": {"estimator": "marshal", "opponent": "random"},
    "at_grpo": AT_GRPO,
    "at_grpo_kl": {**AT_GRPO, "kl_coef": 0.2},
    # The first configuration measured to learn card use on Kuhn (docs/training.md): K = 4
    # all-actions branches, mean-std groups, the KL magnet, four PPO epochs per step.
    "at_grpo_epochs": {
        "estimator": "at_grpo",
        "tree": {"branches": 4, "all_actions": True},
        "kl_coef": 0.2,
        "ppo_epochs": 4,
    },
    # at_grpo_epochs against an opponent pool of its past snapshots (fictitious self-play).
    "at_grpo_pool": {
        "estimator": "at_grpo",
        "tree": {"branches": 4, "all_actions": True},
        "kl_coef": 0.2,
        "ppo_epochs": 4,
        "opponent": "pool",
        "pool_every": 5,
    },
    # at_grpo_epochs whose groups are divided by their information state's spread.
    "at_grpo_state_std": {
        "estimator": "at_grpo",
        "estimator_options": {"scale": "state_std"},
        "tree": {"branches": 4, "all_actions": True},
        "kl_coef": 0.2,
        "ppo_epochs": 4,
    },
    # at_grpo_state_std whose all-actions branches leave invalid samples in place (penalised).
    "at_grpo_keep_invalid": {
        "estimator": "at_grpo",
        "estimator_options": {"scale": "state_std"},
        "tree": {"branches": 4, "all_actions": True, "keep_invalid": True},
        "kl_coef": 0.2,
        "ppo_epochs": 4,
    },
    # at_grpo_epochs whose main lines explore: a uniform branch continues 30% of the time.
    "at_grpo_explore": {
        "estimator": "at_grpo",
        "tree": {"branches": 4, "all_actions": True, "explore": 0.3},
        "kl_coef": 0.2,
        "ppo_epochs": 4,
    },
    "state_groups": {"estimator": "marshal", "estimator_options": {"state_weight": 1.0}},
    "marshal_kl": {"estimator": "marshal", "kl_coef": 0.2},
    "marshal_entropy": {"estimator": "marshal", "entropy_coef": 0.01},
}
TTT_OPPONENTS = ("random", "mcts:100")
SEATS = ("first", "second")
TARGET_EXPLOITABILITY = 0.15  # the best arm, in every seed
REPO = Path(__file__).resolve().parents[1]


RECIPE = REPO / "bench" / "recipes" / "selfplay-generalist.yaml"


def starting_model() -> str:
    from train_backend.pretrain.build import ensure_pretrained_tiny_model, load_recipe

    return str(ensure_pretrained_tiny_model(load_recipe(RECIPE), name=RECIPE.stem))


# The `mars train` flags of a run (the arm's own settings go in its --config file), and the
# TrainConfig field each sets.
FLAG_FIELDS = {"--model": "model", "--games": "games", "--seed": "seed", "--steps": "steps",
               "--games-per-step": "games_per_step", "--lr": "learning_rate",
               "--eval-every": "eval_every"}  # fmt: skip


def run_config(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """The `--config` file of an arm's run: the shared budget's settings, then the arm's."""
    config = {
        "warmup_steps": args.warmup,
        "save_every": args.steps,
        "temperature": args.temperature,
        "kl_coef": args.kl_coef,
        "max_new_tokens": args.max_new_tokens,
        "prompt_style": "compact",
        **ARMS[arm],
    }
    if "tree" in config:
        config["tree"] = {**config["tree"], "branch_rate": args.branch_rate}
    return config


def run_flags(model: str, seed: int, args: argparse.Namespace) -> dict[str, str]:
    values = [model, args.games, seed, args.steps, args.games_per_step, args.lr, 0]
    return {flag: str(value) for flag, value in zip(FLAG_FIELDS, values, strict=True)}


def train_command(flags: dict[str, str], config_file: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "mars", "train", *(w for pair in flags.items() for w in pair),
            "--config", str(config_file), "--run-dir", str(run_dir), "--threads", "1",
            "--quiet"]  # fmt: skip


def train_run(model: str, arm: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    run_dir = root / f"{arm}-seed{seed}"
    config_file = root / f"{arm}-seed{seed}.yaml"
    config_file.write_text(yaml.safe_dump(run_config(arm, args)))
    command = train_command(run_flags(model, seed, args), config_file, run_dir)
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


def measure_command(model: Path | str, args: argparse.Namespace, out: Path) -> list[str]:
    """This script again, measuring one model into `out/figures.json`."""
    return [
        sys.executable, str(Path(__file__).resolve()), "--measure", str(model),
        "--out", str(out), "--temperature", str(args.temperature),
        "--max-new-tokens", str(args.max_new_tokens), "--kuhn-samples", str(args.kuhn_samples),
        "--hanabi-episodes", str(args.hanabi_episodes), "--ttt-episodes", str(args.ttt_episodes),
        "--games", args.games,
    ]  # fmt: skip


def measure_in_child(model: Path | str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """`measure` in a child process (one torch thread, its own memory); returns its figures."""
    command = measure_command(model, args, out)
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"measuring {model} failed:\n{result.stderr[-2000:]}")
    return json.loads((out / "figures.json").read_text())


def measure(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Kuhn exploitability, Mini Hanabi self-play score, Tic-Tac-Toe non-loss per seat."""
    import torch

    from core.batcher import Sampling
    from core.causal_lm import load_policy
    from games.engine import EpisodeOptions
    from games.spec import get_game
    from train_backend.local.evaluate import eval_pairs, evaluate
    from train_backend.local.exploitability import policy_exploitability
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

    trained = args.games.split(",")
    hanabi = []
    if "mini_hanabi" in trained:
        hanabi = [r["returns"][0] for r in play("mini_hanabi", ["self"], args.hanabi_episodes)]
    ttt: dict[str, dict[str, list[int]]] = {}
    ttt_played = "tic_tac_toe" in trained
    for record in play("tic_tac_toe", list(TTT_OPPONENTS), args.ttt_episodes) if ttt_played else []:
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
        print(f"  {arm:<20} " + "   ".join(cells))
    if not start["hanabi"] and not start["ttt"]:
        return
    print("\nMini Hanabi self-play score (mean [95% bootstrap], seeds pooled):")
    rows = {"start": start["hanabi"]}
    rows.update({arm: [v for r in runs if r["arm"] == arm for v in r["hanabi"]] for arm in arms})
    for name, values in rows.items():
        mean, low, high = mean_ci(values)
        print(f"  {name:<20} {mean:.3f} [{low:.3f}, {high:.3f}]  n={len(values)}")
    print("\nTic-Tac-Toe non-loss (seeds pooled; Wilson 95%):")
    keys = [f"{opponent}/{seat}" for opponent in TTT_OPPONENTS for seat in SEATS]
    print(f"  {'model':<20} " + "".join(f"{key:<24}" for key in keys))
    tables = {"start": [start]} | {arm: [r for r in runs if r["arm"] == arm] for arm in arms}
    for name, members in tables.items():
        cells = []
        for key in keys:
            n = sum(m["ttt"].get(key, {}).get("n", 0) for m in members)
            wins = sum(m["ttt"].get(key, {}).get("non_loss", 0) for m in members)
            low, high = wilson_ci(wins, n)
            cells.append(f"{wins / n if n else 0:.2f} [{low:.2f},{high:.2f}]".ljust(24))
        print(f"  {name:<20} " + "".join(cells))


def print_kuhn_comparison(runs: list[dict[str, Any]], arms: list[str]) -> None:
    """Kuhn exploitability per arm (mean and 95% bootstrap interval over seeds), and which pairs
    of arms differ (intervals apart)."""
    print("\nKuhn exploitability over seeds (mean [95% bootstrap over seeds]):")
    intervals = {}
    for arm in arms:
        values = [r["kuhn"]["exploitability"] for r in runs if r["arm"] == arm]
        mean, low, high = mean_ci(values)
        intervals[arm] = (low, high)
        print(f"  {arm:<20} {mean:.3f} [{low:.3f}, {high:.3f}]  seeds={len(values)}")
    apart = [
        f"{a} < {b}" if intervals[a][1] < intervals[b][0] else f"{b} < {a}"
        for i, a in enumerate(arms)
        for b in arms[i + 1 :]
        if intervals[a][1] < intervals[b][0] or intervals[b][1] < intervals[a][0]
    ]
    print("  intervals apart: " + (", ".join(apart) if apart else "none"))


def targets_line(
    start: dict[str, Any], runs: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    """The Tic-Tac-Toe and Mini Hanabi targets of the games trained, as
    `bench/ablation_table.py` reports them (`ttt_hanabi_line`)."""
    from bench.ablation_table import collect_runs, ttt_hanabi_line

    games = args.games.split(",")
    collected = collect_runs(
        [(r["arm"], r["seed"], r, games) for r in runs], {game: start for game in games}
    )
    return ttt_hanabi_line(collected)


def _interval(ci: list[float]) -> str:
    return f"[{ci[0]:.3f},{ci[1]:.3f}]"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--games-per-step", type=int, default=48)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--games", default=",".join(GAMES), help="the training mix")
    parser.add_argument("--marshal-seeds", help="seeds of the marshal arm (default: --seeds)")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument(
        "--branch-rate", type=float, default=1.0,
        help="tree arms: the share of main-line turns that branch (tree.branch_rate)",
    )  # fmt: skip
    parser.add_argument("--kuhn-samples", type=int, default=64)
    parser.add_argument("--hanabi-episodes", type=int, default=200)
    parser.add_argument("--ttt-episodes", type=int, default=30)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-selfplay-ablation"))
    parser.add_argument("--model", help="starting model folder (default: the recipe's build)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: measure one model
    add_dry_run(parser)
    return parser


def chosen_jobs(args: argparse.Namespace) -> list[tuple[str, int]]:
    """Every arm with every seed (the marshal arm with --marshal-seeds)."""
    arms = args.arms.split(",")
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise MarsError(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    seeds = int_list(args.seeds, "--seeds")
    marshal_seeds = int_list(args.marshal_seeds or args.seeds, "--marshal-seeds")
    return [(arm, seed) for arm in arms for seed in (marshal_seeds if arm == "marshal" else seeds)]


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The games; the starting model's recipe; per (arm, seed) its `mars train` command line
    and the config that command resolves from its flags and config file, checked as the CPU
    trainer checks it; the measuring child's command line (the start's, and each run's)."""
    from mars.api.train import resolve_config
    from train_backend.local.trainer import check_config
    from train_backend.pretrain.build import load_recipe

    game_specs(dry, args.games.split(","))
    if args.measure:  # one model measured: the games above are all it reads
        return
    dry.config(lambda: load_recipe(RECIPE), "recipe")
    model = start_model(dry, RECIPE.stem, args.model)
    root = args.out / "dry-run"  # named, not made
    dry.script(measure_command(model, args, root / "start"), build_parser())
    with tempfile.TemporaryDirectory(prefix="mars-ablation-dry-run-") as tmp:
        for arm, seed in chosen_jobs(args):
            config_file = Path(tmp) / f"{arm}-seed{seed}.yaml"
            config_file.write_text(yaml.safe_dump(run_config(arm, args)))
            flags = run_flags(model, seed, args)
            dry.mars(train_command(flags, config_file, root / f"{arm}-seed{seed}"))
            settings = {FLAG_FIELDS[flag]: value for flag, value in flags.items()}
            settings["games"] = args.games.split(",")
            config = dry.config(
                lambda f=config_file, s=settings: resolve_config(f, s, {}, local=True)
            )
            check_config(config)
            checkpoint = root / f"{arm}-seed{seed}" / "checkpoints" / f"step_{args.steps}"
            dry.script(
                measure_command(checkpoint, args, root / f"{arm}-seed{seed}"), build_parser()
            )


def main() -> None:
    args = build_parser().parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    if args.measure:
        figures = measure(args.measure, args)
        (args.out / "figures.json").write_text(json.dumps(figures))
        return
    try:
        jobs = chosen_jobs(args)
    except MarsError as exc:
        sys.exit(str(exc))
    seeds = int_list(args.seeds, "--seeds")
    arms = args.arms.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    root = args.out / time.strftime("%Y%m%d-%H%M%S")
    root.mkdir()

    started = time.perf_counter()
    model = args.model or starting_model()
    print(f"starting model: {model}")
    print(
        f"budget per run: {args.steps} steps x {args.games_per_step} games of "
        f"{args.games}, lr {args.lr}, warm-up {args.warmup}, KL {args.kl_coef}, "
        f"temperature {args.temperature}; seeds {seeds}; {args.parallel} runs at a time"
    )
    start_dir = root / "start"
    start_dir.mkdir()
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        start_job = pool.submit(measure_in_child, model, args, start_dir)
        runs = list(pool.map(lambda job: train_run(model, job[0], job[1], args, root), jobs))
        start = start_job.result()
    print_tables(start, runs, arms)
    print(f"\nbench wall time {(time.perf_counter() - started) / 60:.1f} min; runs in {root}")

    print_kuhn_comparison(runs, arms)
    if "kuhn_poker" not in args.games.split(","):
        line = targets_line(start, runs, args)
        line.update(steps=args.steps, games_per_step=args.games_per_step, games=args.games)
        print(json.dumps(line))
        return
    start_exploit = start["kuhn"]["exploitability"]
    worst = {arm: max(r["kuhn"]["exploitability"] for r in runs if r["arm"] == arm) for arm in arms}
    best = min(arms, key=lambda arm: worst[arm])
    minutes = max((r["train_s"] for r in runs), default=0.0) / 60
    result: dict[str, Any] = {
        "metric": "best_arm_kuhn_exploitability_worst_seed",
        "value": round(worst[best], 4),
        "target": TARGET_EXPLOITABILITY,
        "met": worst[best] <= TARGET_EXPLOITABILITY,
        "best_arm": best,
        "arms_meeting_target": [arm for arm in arms if worst[arm] <= TARGET_EXPLOITABILITY],
        "kuhn_start": round(start_exploit, 4),
        "kuhn_per_arm_per_seed": {
            arm: [round(r["kuhn"]["exploitability"], 4) for r in runs if r["arm"] == arm]
            for arm in arms
        },
        "train_minutes_per_run_max": round(minutes, 2),
        "steps": args.steps,
        "games_per_step": args.games_per_step,
        "games": args.games,
        "learning_rate": args.lr,
        "temperature": args.temperature,
        "seeds": seeds,
    }
    if start.get("hanabi") or start.get("ttt"):
        result["targets"] = targets_line(start, runs, args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
