"""`mars train`: self-play training on the embedded CPU trainer (`--trainer local`) or on verl
(`mars.api.train`).

Settings come from `train_backend.config.TrainConfig`: its defaults (the CPU-sized ones for the
local trainer), then the run's stored config when resuming, then `--config FILE.yaml`, then flags.
The model and sampling options are the shared ones (`--model`, `--temperature`, `--top-p`,
`--max-tokens`, `--seed`); the other shared model options are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import typer

from core.model_options import ModelOptions, SamplingOptions
from mars.commands import options
from mars.commands.app import app
from mars.commands.logger_option import LOGGER
from mars.commands.model_options import model_options

GAMES = typer.Option(None, "--games", help="Comma-separated, e.g. tic_tac_toe,kuhn_poker.")
PRESET = typer.Option(
    None,
    "--preset",
    help="marshal: every choice of the released MARSHAL code (docs/parity.md); none: the "
    "defaults. verl on GPUs uses marshal unless told otherwise.",
)
ESTIMATOR = typer.Option(None, "--estimator", help="marshal, no_turn_level, grpo, at_grpo, ...")
OPPONENT = typer.Option(
    None,
    "--opponent",
    help="Train against a fixed player instead of self-play: random, mcts:N, cfr:N, "
    "checkpoint:PATH, or pool (the policy's own past snapshots, fictitious self-play); the "
    "policy's seat alternates.",
)
RESUME = typer.Option(None, "--resume", help="An existing training run directory to continue.")
DRY_RUN = typer.Option(
    False, "--dry-run", help="Check and print the resolved config; train nothing."
)
RAY_ADDRESS = typer.Option(
    None, "--ray-address", help="verl: attach to this running Ray cluster (e.g. HEAD:6379)."
)


@app.command("train")
@model_options(**options.TRAINING_OPTIONS)
def train_command(
    trainer: str = options.TRAINER,
    config_file: Path = typer.Option(None, "--config", help="A YAML file of TrainConfig fields."),
    games: str = GAMES,
    preset: str = PRESET,
    estimator: str = ESTIMATOR,
    opponent: str = OPPONENT,
    steps: int = typer.Option(None, "--steps", min=1, help="Training steps (updates) in all."),
    games_per_step: int = typer.Option(None, "--games-per-step", min=1, help="Games per step."),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate."),
    kl_coef: float = typer.Option(None, "--kl-coef", help="k3 KL weight (0: no reference)."),
    max_new_tokens: int = options.MAX_NEW_TOKENS,
    eval_every: int = typer.Option(None, "--eval-every", help="Evaluate every N steps (0: never)."),
    save_every: int = typer.Option(None, "--save-every", help="Checkpoint every N steps."),
    threads: int = options.THREADS,
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    resume: Path = RESUME,
    dry_run: bool = DRY_RUN,
    quiet: bool = options.QUIET_STEPS,
    logger: str = LOGGER,
    ray_address: str = RAY_ADDRESS,
    device: str = options.DEVICE,
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
) -> None:
    """Self-play training (MARSHAL): both seats share the policy; checkpoints in RUN/checkpoints."""
    from mars.api.train import TrainPlan, train

    shared = options.training_options(
        "mars train", model_options, sampling, max_new_tokens=max_new_tokens
    )
    train(
        TrainPlan(
            trainer=trainer,
            config_file=config_file,
            games=games,
            preset=preset,
            estimator=estimator,
            opponent=opponent,
            steps=steps,
            games_per_step=games_per_step,
            learning_rate=lr,
            kl_coef=kl_coef,
            eval_every=eval_every,
            save_every=save_every,
            threads=threads,
            out=out,
            run_dir=run_dir,
            resume=resume,
            dry_run=dry_run,
            quiet=quiet,
            logger=logger,
            ray_address=ray_address,
            device=device,
            **shared,
        )
    )
