"""`mars train-mas`: train the agents of a MAS workflow by AT-GRPO inside it (`mars.api.train_mas`).

One shared policy for every role by default; `--policies tool=coder,reasoner=thinker` trains one
policy per role (each with its own optimiser and checkpoints), on the embedded CPU trainer.
`--trainer verl` trains through verl's agent loop (one policy per role: alternating phases).
The model and sampling options are the shared ones, as in `mars train`.
docs/mas_training.md, docs/verl.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

from core.model_options import ModelOptions, SamplingOptions
from mars.commands import options
from mars.commands.app import app
from mars.commands.logger_option import LOGGER
from mars.commands.model_options import model_options

WORKFLOW = typer.Option(
    None,
    "--workflow",
    help="The MAS to train in: reasoner_tool (default), plan_tool, plan_single, code_tester, "
    "ensemble_judge, single, mad.",
)
PRESET = typer.Option(
    None,
    "--preset",
    help="The paper's settings: stronger_mas_plan | stronger_mas_code | stronger_mas_math "
    "(under --config and flags).",
)
POLICIES = typer.Option(
    None, "--policies", help="ROLE=POLICY,...: one policy per role (default: one shared)."
)
ADAPTER = typer.Option(
    None,
    "--adapter",
    help="lora: each policy a LoRA adapter on the one base --model (rank 16, alpha 32; "
    "`adapter:` in --config sets more); none: whole models.",
)
FROZEN = typer.Option(
    None,
    "--frozen",
    help="POLICY,...: policies that play but never update (their model: policy_models, "
    "else --model).",
)
PHASE_ALTERNATE_STEPS = typer.Option(
    None,
    "--phase-alternate-steps",
    min=0,
    help="N: the policies take turns, N updates each (0: all every step; verl: phases).",
)
TRAIN_SET = typer.Option(
    None,
    "--train-set",
    help="arithmetic | gsm8k | math | code_mini | a puzzle suite (plan_path, plan_path_5x5, "
    "sokoban, sudoku, sudoku_9x9).",
)


@app.command("train-mas")
@model_options(**options.TRAINING_OPTIONS)
def train_mas_command(
    workflow: str = WORKFLOW,
    config_file: Path = typer.Option(None, "--config", help="A YAML file of config fields."),
    preset: str = PRESET,
    policies: str = POLICIES,
    adapter: str = ADAPTER,
    frozen: str = FROZEN,
    phase_alternate_steps: int = PHASE_ALTERNATE_STEPS,
    train_set: str = TRAIN_SET,
    train_file: Path = typer.Option(None, "--train-file", help="A local JSONL of problems."),
    steps: int = typer.Option(None, "--steps", help="Updates to make."),
    problems_per_step: int = typer.Option(None, "--problems-per-step"),
    branches: int = typer.Option(None, "--branches", help="K runs branched at every call."),
    lr: float = typer.Option(None, "--lr", help="Learning rate."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Exactly this run directory (resumes)."),
    out: Path = typer.Option(Path("runs"), "--out", help="Parent folder of a new run directory."),
    threads: int = options.THREADS,
    quiet: bool = options.QUIET_STEPS,
    logger: str = LOGGER,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved config and stop."),
    trainer: str = options.TRAINER,
    device: str = options.DEVICE,
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
) -> None:
    """AT-GRPO inside a MAS workflow (Stronger-MAS), on the embedded CPU trainer or verl."""
    from mars.api.train_mas import TrainMasPlan, train_mas

    train_mas(
        TrainMasPlan(
            workflow=workflow,
            config_file=config_file,
            preset=preset,
            policies=policies,
            adapter=adapter,
            frozen=frozen,
            phase_alternate_steps=phase_alternate_steps,
            train_set=train_set,
            train_file=train_file,
            steps=steps,
            problems_per_step=problems_per_step,
            branches=branches,
            learning_rate=lr,
            run_dir=run_dir,
            out=out,
            threads=threads,
            quiet=quiet,
            logger=logger,
            dry_run=dry_run,
            trainer=trainer,
            device=device,
            **options.training_options("mars train-mas", model_options, sampling),
        )
    )
