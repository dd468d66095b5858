"""One verl job for every policy against one launch per phase: the same updates, side by side.

Both arms train reasoner_tool's two roles, one LoRA adapter per role (`--policies
tool=coder,reasoner=thinker`), with verl's own trainer on this machine's CPU (`--device cpu`),
for `--steps` steps from the format-trained test model:

- one job: every policy updated every step in one verl launch (train_backend/verl/policies.py);
- phases: `verl.one_job: false` with `phase_alternate_steps: 1`, the former way: one verl launch
  per policy per step, the other policy served beside it (train_backend/verl/mas_phases.py).

Both arms make the same number of updates (steps x policies) on the same problems. Each arm's
launch count is the verl commands in its logs, and its seconds spent starting are its wall time
less the step times verl logged (`timing_s/step`). Target: the one job in at most 0.5x the
phases' wall time.

    python bench/verl_policies.py [--steps 4] [--model DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import DryRun, add_dry_run, report, run_dry, start_model, workflow_config

TARGET = 0.5
START_MODEL = "test-mas-format"  # tests/model_testkit.py: mas_model()
SETTINGS = {
    "workflow_options": {"rounds": 1, "code_seconds": 2.0},
    "problems_per_step": 2,
    "branches": 4,
    "max_new_tokens": 32,
    "learning_rate": 0.001,
    "warmup_steps": 0,
    "kl_coef": 0.0,
    "temperature": 1.3,
    "save_every": 1,
    "prompt_style": "compact",
    "adapter": "lora",
    "lr_schedule": "constant",  # the phases refuse a schedule that would restart in each
}
ARMS = {
    "one_job": {},
    "phases": {"phase_alternate_steps": 1, "verl": {"device": "cpu", "one_job": False}},
}


def arm_config(arm: str) -> dict:
    return SETTINGS | ARMS[arm]


def command(model: str, config: Path, run: Path, steps: int) -> list[str]:
    return [
        sys.executable, "-m", "mars", "train-mas", "--trainer", "verl", "--device", "cpu",
        "--model", model, "--config", str(config), "--steps", str(steps), "--run-dir", str(run),
        "--policies", "tool=coder,reasoner=thinker",
    ]  # fmt: skip


def launches(run: Path) -> int:
    return sum(log.read_text().count("-m verl.trainer.main_ppo") for log in run.rglob("verl.log"))


def step_seconds(run: Path) -> float:
    """The step times verl logged, every launch's (earlier attempts' files included)."""
    total = 0.0
    for path in run.rglob("metrics*.jsonl"):
        if path.parent.name != "verl":
            continue
        for line in path.read_text().splitlines():
            total += float(json.loads(line)["data"].get("timing_s/step", 0.0))
    return total


def run_arm(arm: str, model: str, root: Path, steps: int) -> dict:
    import yaml

    config = root / f"{arm}.yaml"
    config.write_text(yaml.safe_dump(arm_config(arm)))
    run = root / arm
    started = time.perf_counter()
    done = subprocess.run(
        command(model, config, run, steps), capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{arm}: mars exited {done.returncode}: {done.stderr[-2000:]}")
    stepping = step_seconds(run)
    return {
        "wall_s": round(wall, 1),
        "launches": launches(run),
        "step_s": round(stepping, 1),
        "starting_s": round(wall - stepping, 1),
    }


def dry_run(dry: DryRun) -> None:
    model = start_model(dry, START_MODEL)
    for arm in ARMS:
        workflow_config(dry, arm_config(arm))
        dry.mars(command(model, Path("config.yaml"), Path("run"), 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--model", help="the start model folder (default: the test model)")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    if args.model is None:
        from train_backend.pretrain.mas_start import WorkflowPretrainSettings, ensure_workflow_start

        settings = WorkflowPretrainSettings(examples=480, copy_steps=0, steps=120)
        args.model = str(ensure_workflow_start(settings, name=START_MODEL))
    root = Path(tempfile.mkdtemp(prefix="verl-policies-"))
    arms = {arm: run_arm(arm, args.model, root, args.steps) for arm in ARMS}
    for arm, figures in arms.items():
        print(f"{arm}: {figures}")
    ratio = arms["one_job"]["wall_s"] / arms["phases"]["wall_s"]
    report("one_job_over_phases_wall", ratio, TARGET, steps=args.steps, policies=2, **arms)


if __name__ == "__main__":
    main()
