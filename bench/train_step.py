"""One training step of the CPU trainer, by phase, beside TRL's GRPOTrainer on the same job.

Single-agent GRPO on the arithmetic task, from the MAS-pretrained tiny model
(`train_backend.pretrain.mas_start`): each step takes P problems, samples K replies to each (the
`single` workflow's one call, tree-sampled: K replies to the same prompt, normalised in their
group), scores them (2 for the right `\\boxed{}` answer) and updates once. The same P, K, token
budget, learning rate, temperature, threads and prompts go to TRL's `GRPOTrainer` (no KL, one
update per generation batch, CPU), run by `bench/trl_grpo_steps.py` in an interpreter that has
`trl` (`pip install -e ".[peers]"`, or `--trl-python PATH`).

Per step, mars's own log splits the time into rollout (generation and rewards) and update;
the first step of each side is a warm-up and is left out. With `--verl`, the same job also runs
on verl's CPU path (`mars train-mas --trainer verl --device cpu`) and its step time is split by
verl's own phase timers (`timing_s/*` in RUN/verl/metrics.jsonl). Figures: median seconds per
step of each side, their ratio (target: mars's step no longer than TRL's, ratio <= 1), mars's phase
shares and generated tokens per second of rollout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (
    DryRun,
    add_dry_run,
    report,
    run_dry,
    start_model,
    train_mas_command,
    workflow_config,
)

REPO = Path(__file__).resolve().parents[1]
TRL_SCRIPT = Path(__file__).resolve().parent / "trl_grpo_steps.py"
VERL_CPU = ("--trainer", "verl", "--device", "cpu")


def job_config(model: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "workflow": "single",
        "model": model,
        "seed": args.seed,
        "steps": args.steps,
        "problems_per_step": args.problems,
        "branches": args.branches,
        "learning_rate": args.lr,
        "warmup_steps": 0,
        "kl_coef": 0.0,
        "ppo_epochs": 1,
        "temperature": 1.0,
        "max_new_tokens": args.max_new_tokens,
        "eval_every": 0,
        "save_every": args.steps,
    }


def train_mas(model: str, args: argparse.Namespace, work: Path, *extra: str) -> Path:
    name = "verl" if extra else "local"
    config_file = work / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(job_config(model, args)))
    run_dir = work / f"{name}-run"
    command = train_mas_command(config_file, run_dir, *extra, threads=args.threads)
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mars train-mas ({name}) failed:\n{done.stderr[-2000:]}")
    return run_dir


def jsonl(path: Path) -> list[dict[str, Any]]:
    from core.files import read_jsonl

    return read_jsonl(path).rows


def verl_phases(model: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """verl's CPU step: median seconds of each of its phase timers over the steps after the
    first, and each one's share of the whole step."""
    run_dir = train_mas(model, args, work, *VERL_CPU)
    # verl's file logger writes {"step": N, "data": {metric: value}} per step.
    steps = [row.get("data", row) for row in jsonl(run_dir / "verl" / "metrics.jsonl")[1:]]
    timers = sorted({k for row in steps for k in row if k.startswith("timing_s/")})
    medians = {k: statistics.median(row[k] for row in steps if k in row) for k in timers}
    step = medians.get("timing_s/step")
    for name, seconds in medians.items():
        share = f" ({seconds / step:.0%})" if step else ""
        print(f"  verl {name}: {seconds:.2f} s{share}")
    return {
        "verl_step_s": round(step, 3) if step else None,
        "verl_phase_s": {k.removeprefix("timing_s/"): round(v, 3) for k, v in medians.items()},
    }


def trl_job(model: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The job bench/trl_grpo_steps.py runs: the same prompts, budget and settings."""
    from mas.single import SOLVER_SYSTEM
    from train_backend.mas.arithmetic import arithmetic_problems
    from train_backend.mas.rollout import task_of

    problems = arithmetic_problems(args.steps * args.problems, args.seed, "train")
    prompts = [
        {
            "messages": [
                {"role": "system", "content": SOLVER_SYSTEM},
                {"role": "user", "content": task_of(problem).prompt},
            ],
            "answer": problem.answer,
        }
        for problem in problems
    ]
    return {
        "model": model,
        "prompts": prompts,
        "branches": args.branches,
        "prompts_per_step": args.problems,
        "max_new_tokens": args.max_new_tokens,
        "learning_rate": args.lr,
        "temperature": 1.0,
        "kl_coef": 0.0,
        "ppo_epochs": 1,
        "threads": args.threads,
        "steps": args.steps,
        "seed": args.seed,
        "output_dir": str(work / "trl-out"),
    }


def trl_steps(python: str, model: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    job_file = work / "trl-job.json"
    job_file.write_text(json.dumps(trl_job(model, args, work)))
    done = subprocess.run(
        [python, str(TRL_SCRIPT), str(job_file)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"TRL failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def default_trl_python() -> str | None:
    import importlib.util

    return sys.executable if importlib.util.find_spec("trl") is not None else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--problems", type=int, default=8, help="problems per step (P)")
    parser.add_argument("--branches", type=int, default=4, help="replies per problem (K)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trl-python", default=default_trl_python(), help="python with trl")
    parser.add_argument("--verl", action="store_true", help="also time verl's CPU path by phase")
    add_dry_run(parser)
    return parser


def dry_work() -> Path:
    return Path(tempfile.gettempdir()) / "mars-train-step-dry-run"  # named, not made


def default_job() -> dict[str, Any]:
    """The TRL job of the default settings (bench/trl_grpo_steps.py's dry run checks it)."""
    from train_backend.pretrain.build import default_pretrained_dir
    from train_backend.pretrain.mas_start import MAS_START_NAME

    args = build_parser().parse_args([])
    return trl_job(str(default_pretrained_dir(MAS_START_NAME)), args, dry_work())


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The job as `mars train-mas` checks it, its command lines (local; verl's CPU path with
    --verl), and TRL's job as bench/trl_grpo_steps.py checks it, with that script's line."""
    import importlib.util

    from bench.trl_grpo_steps import build_parser as trl_parser
    from bench.trl_grpo_steps import check_job
    from core.errors import MarsError
    from train_backend.pretrain.mas_start import MAS_START_NAME

    model = start_model(dry, MAS_START_NAME)
    work = dry_work()
    workflow_config(dry, job_config(model, args))
    dry.mars(train_mas_command(work / "local.yaml", work / "local-run", threads=args.threads))
    if args.verl:
        if importlib.util.find_spec("verl") is None:
            raise MarsError("--verl: verl is not installed (make setup-verl)")
        dry.mars(train_mas_command(work / "verl.yaml", work / "verl-run", *VERL_CPU,
                                   threads=args.threads))  # fmt: skip
    problems = check_job(trl_job(model, args, work))
    if problems:
        raise MarsError(f"TRL job: {'; '.join(problems)}")
    dry.count("job")
    if args.trl_python:
        dry.script([args.trl_python, str(TRL_SCRIPT), str(work / "trl-job.json")], trl_parser())
    else:
        dry.note("TRL is not installed here: no ratio")


def main() -> None:
    args = build_parser().parse_args()
    if args.steps < 2:
        raise SystemExit("--steps must be at least 2 (the first step is a warm-up)")
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    from train_backend.pretrain.mas_start import ensure_workflow_start

    model = str(ensure_workflow_start())
    with tempfile.TemporaryDirectory(prefix="mars-train-step-") as tmp:
        work = Path(tmp)
        steps = jsonl(train_mas(model, args, work) / "metrics.jsonl")[1:]
        trl = trl_steps(args.trl_python, model, args, work) if args.trl_python else None
        verl = verl_phases(model, args, work) if args.verl else {}
        shutil.rmtree(work / "trl-out", ignore_errors=True)

    step_s = statistics.median(m["seconds_per_step"] for m in steps)
    rollout_s = statistics.median(m["rollout_s"] for m in steps)
    update_s = statistics.median(m["update_s"] for m in steps)
    tokens = statistics.median(m["generated_tokens"] for m in steps)
    print(
        f"mars: {step_s:.2f} s/step (rollout {rollout_s:.2f} s = {rollout_s / step_s:.0%}, "
        f"update {update_s:.2f} s = {update_s / step_s:.0%}), {tokens:.0f} tokens generated, "
        f"{tokens / rollout_s:.0f} tokens/s in the rollout"
    )
    figures: dict[str, Any] = {
        "mars_step_s": round(step_s, 3),
        "rollout_share": round(rollout_s / step_s, 3),
        "update_share": round(update_s / step_s, 3),
        "other_share": round(1 - (rollout_s + update_s) / step_s, 3),
        "mars_generated_tokens": tokens,
        "rollout_tokens_per_s": round(tokens / rollout_s, 1),
        "steps_timed": len(steps),
        "problems": args.problems,
        "branches": args.branches,
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        **verl,
    }
    if trl is None:
        print("TRL is not installed here (pip install -e '.[peers]' or --trl-python): no ratio")
        line = {"metric": "mars_step_over_trl_step", "value": None, "target": 1.0, "met": False}
        print(json.dumps({**line, "trl": "not installed", **figures}))
        return
    trl_s = statistics.median(trl["step_seconds"][1:])
    trl_tokens = statistics.median(trl["mean_completion_tokens"][1:] or [0])
    print(f"TRL:  {trl_s:.2f} s/step, mean completion {trl_tokens:.1f} tokens")
    report(
        "mars_step_over_trl_step",
        step_s / trl_s,
        1.0,
        trl_step_s=round(trl_s, 3),
        trl_mean_completion_tokens=trl_tokens,
        **figures,
    )


if __name__ == "__main__":
    main()
