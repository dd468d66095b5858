"""The MAS miniatures: single-agent GRPO vs a two-role workflow, one policy or one per role.

`--domain arithmetic` (the default) trains `reasoner_tool` on arithmetic; `--domain plan` trains
`plan_tool` (tool agent + plan agent, 2 turns) on 5 x 5 Plan-Path levels from the planning start
model (`train_backend.pretrain.plan_start`: the right search program or a one-token-wrong one, the
printed list copied or not, each about half the time), its `single` arm being `plan_single` (the
plan agent alone, same turns), measured on the suite's evaluation levels (`plan_path_5x5`, which
no training level equals). The arithmetic miniature:

From the same starting model (`train_backend.pretrain.mas_start`: the tiny model taught each role's
reply format on arithmetic, copying faithfully about half the time), on the arithmetic training
set, the same budget per arm (steps x problems per step, K branches, learning rate):

- `single`: the `single` workflow (one solver, `\\boxed{}` answer): tree sampling at its one call
  is single-agent GRPO (K replies to the same prompt, normalised in the group);
- `mas_shared`: `reasoner_tool`, one policy for both roles (the role is in the system prompt);
- `mas_per_role`: `reasoner_tool`, a policy per role (`tool=tool,reasoner=reasoner`), each a
  whole copy of the model;
- `mas_lora`: the same roles, each policy a LoRA adapter (rank 16, alpha 32) on one base, at its
  own learning rate (`--lora-lr`: an adapter's few weights want a larger step).

Beside accuracy, each (arm, seed) records its trainable parameters, the training process's peak
resident memory (its own rusage) and the mean seconds per step, measured in the same run.

Each (arm, seed) is a `mars train-mas` process; the start and the last checkpoints are measured
on the seed's held-out arithmetic problems (never trained on: a separate split), one workflow
run per problem at the training temperature, Wilson 95% intervals. Then the table over seeds:
each arm's start and end accuracy with a 95% Student-t interval over seeds, and Welch's t-test of
every pair of arms' end accuracies (Holm-corrected). The last line (JSON): the worst margin, over
both MAS regimes and every seed, between the end's interval and the start's (end's lower bound
minus start's upper bound; the target is a margin above 0: intervals apart in every seed), and
each arm's mean gain.

Run: .venv/bin/python bench/mas_training.py [--domain plan] [--seeds 0,1,2] [--arms ...]
     [--parallel 2] (each (arm, seed) its own process, one thread each)
     .venv/bin/python bench/mas_training.py --table ROOT/results.json   (the table again)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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
from bench.ablation_table import holm, t_interval, welch
from core.errors import MarsError
from core.stats import wilson_ci

REPO = Path(__file__).resolve().parents[1]
ARITHMETIC_OPTIONS = {"rounds": 2, "code_seconds": 5.0}
PLAN_OPTIONS = {"max_turns": 2, "code_seconds": 5.0}
# domain -> arm -> the arm's training settings (each arm its own workflow options: a workflow
# refuses an option it never reads)
DOMAINS: dict[str, dict[str, dict[str, Any]]] = {
    "arithmetic": {
        "single": {"workflow": "single"},
        "mas_shared": {"workflow": "reasoner_tool", "workflow_options": ARITHMETIC_OPTIONS},
        "mas_per_role": {
            "workflow": "reasoner_tool",
            "workflow_options": ARITHMETIC_OPTIONS,
            "policies": {"tool": "tool", "reasoner": "reasoner"},
        },
        "mas_lora": {
            "workflow": "reasoner_tool",
            "workflow_options": ARITHMETIC_OPTIONS,
            "policies": {"tool": "tool", "reasoner": "reasoner"},
            "adapter": "lora",
        },
    },
    "plan": {
        "single": {"workflow": "plan_single", "workflow_options": {"max_turns": 2}},
        "mas_shared": {"workflow": "plan_tool", "workflow_options": PLAN_OPTIONS},
        "mas_per_role": {
            "workflow": "plan_tool",
            "workflow_options": PLAN_OPTIONS,
            "policies": {"tool": "tool", "plan": "plan"},
        },
        "mas_lora": {
            "workflow": "plan_tool",
            "workflow_options": PLAN_OPTIONS,
            "policies": {"tool": "tool", "plan": "plan"},
            "adapter": "lora",
        },
    },
}
DEFAULT_ARMS = ("single", "mas_shared", "mas_per_role")
PLAN_SUITE = "plan_path_5x5"
# Planning at 1e-3 collapsed by step 4 (the tool agent's 290-token program turned to noise)
DEFAULT_LR = {"arithmetic": 3e-4, "plan": 2e-4}
DEFAULT_STEPS = {"arithmetic": 40, "plan": 12}
# replies: arithmetic's are a line; the planning tool agent's program is about 290 tokens
MAX_NEW_TOKENS = {"arithmetic": 32, "plan": 320}
# Sampling beyond the temperature (1.0 in training and measuring): planning keeps the paper's
# top-p 0.9 / top-k 20 (the stronger_mas presets); without them one unlikely token among the
# program's 290 broke it a third of the time (measured on a start model: 19 of 57 tool replies).
TRUNCATION = {"arithmetic": {}, "plan": {"top_p": 0.9, "top_k": 20}}
ARMS = DOMAINS["arithmetic"]


def arm_settings(arm: str, domain: str) -> dict[str, Any]:
    """The arm's workflow, its options and its policies (each arm only the options its
    workflow reads: a workflow refuses another's)."""
    arms = DOMAINS[domain]
    if arm not in arms:
        raise MarsError(f"unknown arm {arm!r}; the arms: {', '.join(arms)}")
    return arms[arm]


def chosen_arms(args: argparse.Namespace) -> list[str]:
    arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    for arm in arms:
        arm_settings(arm, args.domain)
    return arms


def train_config(arm: str, seed: int, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """The `mars train-mas --config` file of one (arm, seed)."""
    config = {
        **arm_settings(arm, args.domain),
        "model": model,
        "seed": seed,
        "steps": args.steps,
        "problems_per_step": args.problems,
        "branches": args.branches,
        "learning_rate": args.lora_lr if "adapter" in arm_settings(arm, args.domain) else args.lr,
        "warmup_steps": 2,
        "kl_coef": args.kl_coef,
        "ppo_epochs": args.epochs,
        "temperature": 1.0,
        **TRUNCATION[args.domain],
        "max_new_tokens": MAX_NEW_TOKENS[args.domain],
        "heldout_problems": args.heldout,
        "eval_every": 0,
        "save_every": args.steps,
    }
    if args.domain == "plan":
        config["train_set"] = PLAN_SUITE
    return config


def train_arm(arm: str, seed: int, model: str, args: argparse.Namespace, root: Path) -> Path:
    run_dir = root / f"{arm}-seed{seed}"
    config_file = root / f"{arm}-seed{seed}.yaml"
    config_file.write_text(yaml.safe_dump(train_config(arm, seed, model, args)))
    started = time.perf_counter()
    command = train_mas_command(config_file, run_dir, *trainer_options(args, model))
    log = root / f"{arm}-seed{seed}.log"
    with log.open("w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not the sum
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed:\n{log.read_text()[-2000:]}")
    print(f"  {arm} seed {seed}: {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    (root / f"{arm}-seed{seed}.cost.json").write_text(json.dumps(training_cost(run_dir, usage)))
    return run_dir


def trainer_options(args: argparse.Namespace, model: str) -> list[str]:
    """The CPU trainer (default), or verl's trainer on this CPU (`--trainer verl`: one verl job,
    every policy every step; the start model given as verl's --model)."""
    if args.trainer == "local":
        return []
    return ["--trainer", "verl", "--device", "cpu", "--model", model]


def training_cost(run_dir: Path, usage: Any) -> dict[str, float]:
    """Trainable parameters, peak resident memory (MiB, Linux's ru_maxrss is in KiB) and the
    mean seconds per step (and its update part) of one training process."""
    if (run_dir / "verl").is_dir():
        return verl_training_cost(run_dir, usage)
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trainable = sum(summary.get("trainable_parameters", {}).values())
    held = summary.get("parameters_in_memory", 0)
    return {
        "trainable_parameters": trainable,
        # fp32 weights, and for each trained one its gradient and AdamW's two moments
        "model_state_mib": round((4 * held + 12 * trainable) / 2**20, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "seconds_per_step": round(sum(m["seconds_per_step"] for m in steps) / len(steps), 3),
        "update_seconds": round(sum(m["update_s"] for m in steps) / len(steps), 3),
    }


def verl_training_cost(run_dir: Path, usage: Any) -> dict[str, float]:
    """A verl run's step times from verl's own metrics (its workers' memory is not this
    process's: the peak is the launcher's alone)."""
    steps = []
    for line in (run_dir / "verl" / "metrics.jsonl").read_text().splitlines():
        steps.append(json.loads(line)["data"])
    return {
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "seconds_per_step": round(sum(m.get("timing_s/step", 0.0) for m in steps) / len(steps), 3),
        "update_seconds": round(
            sum(m.get("timing_s/update_actor", 0.0) for m in steps) / len(steps), 3
        ),
    }


def measure_config(arm: str, seed: int, args: argparse.Namespace) -> Any:
    """The workflow config the held-out answers are measured with."""
    from train_backend.mas.config import WorkflowTrainConfig

    return WorkflowTrainConfig.for_local(
        **arm_settings(arm, args.domain), seed=seed, temperature=1.0,
        max_new_tokens=MAX_NEW_TOKENS[args.domain], **TRUNCATION[args.domain],
    )  # fmt: skip


def measure(arm: str, seed: int, models: dict[str, str], args: argparse.Namespace) -> list[bool]:
    """Held-out answers of the workflow with these policies (policy name -> model folder)."""
    import torch

    from core.batcher import MicroBatcher, Sampling, generate_batch
    from train_backend.local.adapters import load_any
    from train_backend.mas.arithmetic import arithmetic_problems
    from train_backend.mas.config import SHARED_POLICY
    from train_backend.mas.data import puzzle_problems
    from train_backend.mas.rewards import ROLES
    from train_backend.mas.role_models import role_model
    from train_backend.mas.trainer import answered_right

    torch.set_num_threads(1)
    tokens = MAX_NEW_TOKENS[args.domain]
    truncation = TRUNCATION[args.domain]
    config = measure_config(arm, seed, args)
    owners = config.role_policies(ROLES[config.workflow])
    built = {}
    for index, name in enumerate(dict.fromkeys(owners.values())):
        policy = load_any(models.get(name, models.get(SHARED_POLICY, "")))
        generator = torch.Generator().manual_seed(10_000 + seed * 10 + index)
        batcher = MicroBatcher(
            lambda requests, p=policy, g=generator: generate_batch(
                p, requests, Sampling(temperature=1.0, **truncation), g
            ),
            max_batch=64,
        )
        built[name] = role_model(name, policy, batcher, tokens)
    roles = {role: built[name] for role, name in owners.items()}
    if args.domain == "plan":  # the suite's own evaluation levels: the same for every seed
        problems = puzzle_problems(PLAN_SUITE, "eval", args.heldout)
    else:
        problems = arithmetic_problems(args.heldout, seed, "heldout")
    return answered_right(config, problems, roles)


def trained_models(run_dir: Path, arm: dict[str, Any], steps: int) -> dict[str, str]:
    if "policies" not in arm:
        return {"policy": str(run_dir / "checkpoints" / f"step_{steps}")}
    return {
        name: str(run_dir / "policies" / name / "checkpoints" / f"step_{steps}")
        for name in set(arm["policies"].values())
    }


def _cell(right: list[bool]) -> tuple[float, float, float]:
    low, high = wilson_ci(sum(right), len(right))
    return sum(right) / len(right), low, high


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domain", choices=sorted(DOMAINS), default="arithmetic")
    parser.add_argument("--steps", type=int, help="default: 40 (arithmetic), 12 (plan)")
    parser.add_argument("--problems", type=int, default=8, help="problems per step")
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--lr", type=float, help="default: 3e-4 (arithmetic), 2e-4 (plan)")
    parser.add_argument("--lora-lr", type=float, default=2e-3, help="the mas_lora arm's")
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument(
        "--trainer", choices=("local", "verl"), default="local", help="verl: on this CPU"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--heldout", type=int, default=200)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"of: {', '.join(ARMS)}")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-mas-training"))
    parser.add_argument("--table", type=Path, help="print the table of a finished results.json")
    parser.add_argument("--parallel", type=int, default=1, help="(arm, seed) jobs run at once")
    parser.add_argument("--job", help=argparse.SUPPRESS)  # ARM:SEED, from --parallel
    add_dry_run(parser)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    args.steps = args.steps or DEFAULT_STEPS[args.domain]
    args.lr = args.lr or DEFAULT_LR[args.domain]
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    if args.table is not None:
        summarise_file(args.table, args.steps)
        return
    try:
        jobs = chosen_jobs(args)
    except MarsError as exc:
        sys.exit(str(exc))
    if args.domain == "plan":
        from train_backend.pretrain.plan_start import ensure_plan_start

        start = str(ensure_plan_start())
    else:
        from train_backend.pretrain.mas_start import ensure_workflow_start

        start = str(ensure_workflow_start())
    if args.job is not None:  # one (arm, seed) of a parallel run, in its own process
        arm, seed = jobs[0]
        run_job(arm, seed, start, args, args.out)
        return
    seeds = int_list(args.seeds, "--seeds")
    root = args.out / time.strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    print(f"start model {start}; {args.steps} steps x {args.problems} problems, K {args.branches}")
    if args.parallel > 1:
        run_jobs_in_processes(jobs, root, args)
    else:
        for arm, seed in jobs:
            run_job(arm, seed, start, args, root)
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, seed in jobs:
        cells = json.loads((root / f"{arm}-seed{seed}.json").read_text())
        cost = root / f"{arm}-seed{seed}.cost.json"
        rows.setdefault(arm, {})[seed] = {**cells, "cost": json.loads(cost.read_text())}
    (root / "results.json").write_text(json.dumps(rows, indent=2))
    print(f"domain {args.domain}")
    summarise(rows, seeds, args.steps)


def chosen_jobs(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The (arm, seed) jobs to run: `--job`'s one, else every arm with every seed."""
    if args.job is not None:
        arm, _, seed = args.job.partition(":")
        arm_settings(arm, args.domain)
        if not seed.isdigit():
            raise MarsError(f"--job {args.job}: expected ARM:SEED")
        return [(arm, int(seed))]
    seeds = int_list(args.seeds, "--seeds")
    # seed by seed, the arms interleaved: whatever else loads the machine meanwhile weighs on
    # every arm's step time alike
    return [(arm, seed) for seed in seeds for arm in chosen_arms(args)]


def summarise_file(path: Path, steps: int) -> None:
    rows = {
        arm: {int(seed): cells for seed, cells in by.items()}
        for arm, by in json.loads(path.read_text()).items()
    }
    summarise(rows, sorted({s for by in rows.values() for s in by}), steps)


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """Per (arm, seed): its `mars train-mas` config as that command checks it, and the command
    line; the config its held-out answers are measured with; the line of its `--parallel` job
    (checked with or without --parallel: that path is otherwise exercised only by long runs)."""
    from train_backend.mas.rewards import ROLES

    if args.table is not None:
        dry.config(lambda: json.loads(args.table.read_text()), "results file")
        return
    if args.domain == "plan":
        from harness.benchmarks import get_suite
        from train_backend.pretrain.plan_start import PLAN_START_NAME

        dry.config(lambda: get_suite(PLAN_SUITE), "suite")
        start = start_model(dry, PLAN_START_NAME)
    else:
        from train_backend.pretrain.mas_start import MAS_START_NAME

        start = start_model(dry, MAS_START_NAME)
    root = args.out / "dry-run"  # named, not made
    for arm, seed in chosen_jobs(args):
        workflow_config(dry, train_config(arm, seed, start, args))
        dry.mars(
            train_mas_command(
                root / f"{arm}-seed{seed}.yaml",
                root / f"{arm}-seed{seed}",
                *trainer_options(args, start),
            )
        )
        config = dry.config(lambda a=arm, s=seed: measure_config(a, s, args), "measure config")
        config.role_policies(ROLES[config.workflow])
        dry.script(job_command(arm, seed, root, args), build_parser())


def run_job(arm: str, seed: int, start: str, args: argparse.Namespace, root: Path) -> None:
    """Measure the start, train, measure the end: `root/ARM-seedS.json` holds both cells."""
    starts = {"policy": start, "tool": start, "reasoner": start, "plan": start}
    before = _cell(measure(arm, seed, starts, args))
    run_dir = train_arm(arm, seed, start, args, root)
    after = _cell(
        measure(
            arm, seed, trained_models(run_dir, arm_settings(arm, args.domain), args.steps), args
        )
    )
    (root / f"{arm}-seed{seed}.json").write_text(json.dumps({"before": before, "after": after}))
    print(f"  {arm} seed {seed}: {before[0]:.2f} [{before[1]:.2f}, {before[2]:.2f}] -> "
          f"{after[0]:.2f} [{after[1]:.2f}, {after[2]:.2f}]", flush=True)  # fmt: skip


# what a job process is told: the settings that shape the training and the measuring
JOB_SETTINGS = (
    "domain", "steps", "problems", "branches", "lr", "lora_lr", "kl_coef", "epochs", "heldout",
    "trainer",
)  # fmt: skip


def job_command(arm: str, seed: int, root: Path, args: argparse.Namespace) -> list[str]:
    """This script again, for one (arm, seed) of a `--parallel` run."""
    passed = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in JOB_SETTINGS]
    return [sys.executable, __file__, *passed, "--job", f"{arm}:{seed}", "--out", str(root)]


def run_jobs_in_processes(
    jobs: list[tuple[str, int]], root: Path, args: argparse.Namespace
) -> None:
    """At most `--parallel` jobs at once, each this script again with `--job ARM:SEED` (one
    thread each: on a small machine, processes use its cores better than threads)."""

    def run(job: tuple[str, int]) -> None:
        arm, seed = job
        command = job_command(arm, seed, root, args)
        if subprocess.run(command, cwd=REPO, check=False).returncode != 0:
            raise RuntimeError(f"{arm} seed {seed} failed")

    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(run, jobs))


def print_table(rows: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each arm over its seeds (mean and 95% t interval), then the pairs of arms whose end
    accuracies differ (Welch over seeds, Holm over the pairs); returns the significant pairs."""
    print("\n| arm | start, per seed | end, per seed | end, mean [95% t over seeds] | gain |")
    print("|---|---|---|---|---|")
    ends: dict[str, dict[int, float]] = {}
    for arm, by in rows.items():
        before = [by[seed]["before"][0] for seed in sorted(by)]
        after = [by[seed]["after"][0] for seed in sorted(by)]
        ends[arm] = dict(zip(sorted(by), after, strict=True))
        low, high = t_interval(after)
        gain = sum(after) / len(after) - sum(before) / len(before)
        print(f"| {arm} | {', '.join(f'{v:.2f}' for v in before)} | "
              f"{', '.join(f'{v:.2f}' for v in after)} | {sum(after) / len(after):.3f} "
              f"[{low:.3f}, {high:.3f}] | {gain:+.3f} |")  # fmt: skip
    arms = [arm for arm, by in ends.items() if len(by) >= 2]
    tests = [welch(ends, a, b) for i, a in enumerate(arms) for b in arms[i + 1 :]]
    significant = holm(tests)
    for test in tests:
        verdict = "significant" if test in significant else "not significant"
        print(f"  {test['higher']} > {test['lower']}: p = {test['p']:.4f} ({verdict}, Holm)")
    return significant


def summarise(rows: dict[str, dict[int, dict[str, Any]]], seeds: list[int], steps: int) -> None:
    significant = print_table(rows)
    gains = {
        arm: round(sum(c["after"][0] - c["before"][0] for c in by.values()) / len(by), 4)
        for arm, by in rows.items()
    }
    # How far each seed's end interval lies above its start interval (Wilson bounds): the
    # target is a positive margin for both MAS regimes in every seed.
    margins = {
        arm: [round(c["after"][1] - c["before"][2], 4) for _, c in sorted(by.items())]
        for arm, by in rows.items()
    }
    mas_arms = [arm for arm in ("mas_shared", "mas_per_role", "mas_lora") if arm in rows]
    worst = min((min(margins[arm]) for arm in mas_arms), default=-1.0)
    costs = print_costs(rows)
    report(
        "mas_regimes_worst_seed_interval_margin", worst, 0.0, lower_is_better=False,
        strictly_above=worst > 0, gains=gains, margins=margins, seeds=seeds, steps=steps,
        significant_pairs=[f"{t['higher']} > {t['lower']}" for t in significant],
        **costs,
    )  # fmt: skip


def print_costs(rows: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """Each arm's training cost, mean over seeds, and its ratio to one shared policy's."""
    means: dict[str, dict[str, float]] = {}
    for arm, by in rows.items():
        costs = [cells["cost"] for cells in by.values() if "cost" in cells]
        if costs:
            means[arm] = {key: sum(c[key] for c in costs) / len(costs) for key in costs[0]}
    if not means:
        return {}
    shared = means.get("mas_shared")
    print("\n| arm | trainable parameters | model state (MiB) | peak resident memory (MiB) "
          "| s / step | update s |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for arm, cost in means.items():
        ratio = f" ({cost['peak_rss_mib'] / shared['peak_rss_mib']:.2f}x)" if shared else ""
        state = f"{cost['model_state_mib']:.1f}" if "model_state_mib" in cost else "-"
        # a verl run's workers are other processes: its launcher records no parameter count
        trainable = cost.get("trainable_parameters")
        counted = f"{trainable:,.0f}" if trainable is not None else "-"
        print(f"| {arm} | {counted} | {state} | "
              f"{cost['peak_rss_mib']:.0f}{ratio} | {cost['seconds_per_step']:.2f} "
              f"| {cost['update_seconds']:.2f} |")  # fmt: skip
    out: dict[str, Any] = {"costs": means}
    if shared:
        for arm in ("mas_per_role", "mas_lora"):
            if arm in means:
                out[f"{arm}_memory_over_shared"] = round(
                    means[arm]["peak_rss_mib"] / shared["peak_rss_mib"], 3
                )
                if shared.get("model_state_mib"):
                    out[f"{arm}_model_state_over_shared"] = round(
                        means[arm].get("model_state_mib", 0.0) / shared["model_state_mib"], 3
                    )
    return out


if __name__ == "__main__":
    main()
