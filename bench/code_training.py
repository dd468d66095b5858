"""The code miniature: the coder's pass rate and the tester's test validity over training.

From the code start model (`train_backend.pretrain.code_start`: the tiny model taught code_tester's
formats on `code_mini`, writing the reference solution or an off-by-one one, and tests whose
outputs are right or off by one, each about half the time), `code_tester` is trained by AT-GRPO
(one policy per role: coder, tester) on the procedural stdin/stdout set `code_mini`, one
`mars train-mas` process per seed. Every step's main lines report the coder's last program's
pass ratio on the ground-truth tests (`code/pass_ratio`) and the share of the tester's tests the
reference solution passes (`code/test_validity`); the held-out success (every ground-truth test
passed) is measured at the start and the end of each seed (Wilson 95% intervals).

The last line (JSON): the mean over seeds of the pass ratio and the validity in the first and the
last `--window` steps, and the held-out success before and after. No figure has a target: the
issue asks that they be reported (`met` says whether the pass rate rose).

Run: .venv/bin/python bench/code_training.py [--steps 30] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (
    DryRun,
    add_dry_run,
    int_list,
    report,
    run_dry,
    start_model,
    train_mas_command,
    workflow_config,
)
from core.errors import MarsError
from core.files import read_jsonl
from core.stats import wilson_ci

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = {
    "workflow": "code_tester",
    "workflow_options": {"max_turns": 1, "code_seconds": 10.0, "test_seconds": 2.0},
    "policies": {"coder": "coder", "tester": "tester"},
    "train_set": "code_mini",
}
MAX_NEW_TOKENS = 96
ROLES = ("coder", "tester")  # each its own policy, named after it


def train_config(seed: int, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """The `mars train-mas --config` file of one seed."""
    return {
        **WORKFLOW,
        "model": model,
        "seed": seed,
        "steps": args.steps,
        "problems_per_step": args.problems,
        "branches": args.branches,
        "learning_rate": args.lr,
        "warmup_steps": 2,
        "kl_coef": 0.0,
        "ppo_epochs": 2,
        "temperature": 1.0,
        "max_new_tokens": MAX_NEW_TOKENS,
        "heldout_problems": args.heldout,
        "eval_every": 0,
        "save_every": args.steps,
    }


def train(seed: int, model: str, args: argparse.Namespace, root: Path) -> Path:
    run_dir = root / f"seed{seed}"
    config_file = root / f"seed{seed}.yaml"
    config_file.write_text(yaml.safe_dump(train_config(seed, model, args)))
    command = train_mas_command(config_file, run_dir)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed} failed:\n{done.stderr[-2000:]}")
    print(f"  seed {seed}: {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return run_dir


def heldout_config(seed: int) -> Any:
    """The workflow config the held-out success is measured with."""
    from train_backend.mas.config import WorkflowTrainConfig

    return WorkflowTrainConfig.for_local(
        **WORKFLOW, seed=seed, temperature=1.0, max_new_tokens=MAX_NEW_TOKENS
    )


def heldout_success(seed: int, models: dict[str, str], args: argparse.Namespace) -> list[bool]:
    import torch

    from core.batcher import MicroBatcher, Sampling, generate_batch
    from core.causal_lm import load_policy
    from train_backend.mas.code_problems import code_problems
    from train_backend.mas.role_models import role_model
    from train_backend.mas.trainer import answered_right

    torch.set_num_threads(1)
    config = heldout_config(seed)
    roles = {}
    for index, role in enumerate(ROLES):
        policy = load_policy(models[role])
        generator = torch.Generator().manual_seed(10_000 + seed * 10 + index)
        batcher = MicroBatcher(
            lambda requests, p=policy, g=generator: generate_batch(
                p, requests, Sampling(temperature=1.0), g
            ),
            max_batch=64,
        )
        roles[role] = role_model(role, policy, batcher, MAX_NEW_TOKENS)
    return answered_right(config, code_problems(args.heldout, seed, "heldout"), roles)


def curves(run_dir: Path) -> dict[str, list[float]]:
    rows = read_jsonl(run_dir / "metrics.jsonl").rows
    steps = [row for row in rows if "code/pass_ratio" in row]
    return {
        name: [float(row.get(name, 0.0)) for row in steps]
        for name in ("code/pass_ratio", "code/test_validity")
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """Per seed: its `mars train-mas` config as that command checks it, and the command line;
    the config its held-out success is measured with, whose roles are the bench's."""
    from train_backend.mas.rewards import ROLES as WORKFLOW_ROLES
    from train_backend.pretrain.code_start import CODE_START_NAME

    start = start_model(dry, CODE_START_NAME)
    root = args.out / "dry-run"  # named, not made
    for seed in int_list(args.seeds, "--seeds"):
        workflow_config(dry, train_config(seed, start, args))
        dry.mars(train_mas_command(root / f"seed{seed}.yaml", root / f"seed{seed}"))
        config = dry.config(lambda s=seed: heldout_config(s), "measure config")
        owners = config.role_policies(WORKFLOW_ROLES[config.workflow])
        if tuple(owners) != ROLES or list(owners.values()) != list(ROLES):
            raise MarsError(f"{config.workflow}'s roles and policies are {owners}, not {ROLES}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--problems", type=int, default=8, help="problems per step")
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--heldout", type=int, default=35)
    parser.add_argument("--window", type=int, default=5, help="steps averaged at each end")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-code-training"))
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    from train_backend.pretrain.code_start import ensure_code_start

    start = str(ensure_code_start())
    seeds = int_list(args.seeds, "--seeds")
    root = args.out / time.strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[float]] = {}
    print(f"start model {start}; {args.steps} steps x {args.problems} problems, K {args.branches}")
    for seed in seeds:
        before = heldout_success(seed, {"coder": start, "tester": start}, args)
        run_dir = train(seed, start, args, root)
        trained = {
            role: str(run_dir / "policies" / role / "checkpoints" / f"step_{args.steps}")
            for role in ROLES
        }
        after = heldout_success(seed, trained, args)
        curve = curves(run_dir)
        for name, values in curve.items():
            figures.setdefault(f"{name}/first", []).append(_mean(values[: args.window]))
            figures.setdefault(f"{name}/last", []).append(_mean(values[-args.window :]))
            print(f"  seed {seed} {name}: " + " ".join(f"{v:.2f}" for v in values))
        for label, right in (("before", before), ("after", after)):
            low, high = wilson_ci(sum(right), len(right))
            figures.setdefault(f"heldout/{label}", []).append(sum(right) / len(right))
            print(f"  seed {seed} held-out success {label}: {sum(right) / len(right):.2f} "
                  f"[{low:.2f}, {high:.2f}]")  # fmt: skip
    means: dict[str, Any] = {name: round(_mean(values), 4) for name, values in figures.items()}
    rise = means["code/pass_ratio/last"] - means["code/pass_ratio/first"]
    report(
        "code_miniature_pass_ratio_rise", round(rise, 4), 0.0, lower_is_better=False,
        seeds=seeds, steps=args.steps, **{k.replace("/", "_"): v for k, v in means.items()},
    )  # fmt: skip


if __name__ == "__main__":
    main()
