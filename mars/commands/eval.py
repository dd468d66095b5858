"""`mars eval`: reasoning suites through a multi-agent system (`mars.api.evaluate`)."""

from __future__ import annotations

from pathlib import Path

import typer

from core.model_options import ModelOptions, SamplingOptions
from mars.commands import options
from mars.commands.app import app
from mars.commands.model_options import model_options

SUITE = typer.Option(..., "--suite", help="Comma-separated suites, e.g. gsm8k,math500.")
MAS = typer.Option(None, "--mas", help="Multi-agent system: single, mad, ... (default: single)")
MAS_OPTION = typer.Option(
    [], "--mas-option", help="A MAS setting KEY=VALUE, e.g. rounds=2 (repeatable)."
)
LIMIT = typer.Option(None, "--limit", help="First N samples of each suite.")
EPOCHS = typer.Option(None, "--epochs", min=1, help="Attempts per sample (default 1).")
MATCH_COMPUTE = typer.Option(
    None,
    "--match-compute",
    help="A MAS eval run of the same suites and limit: run the single agent with a majority "
    "vote over k samples per question, k chosen so its tokens per question (prompt + "
    "completion) match that run's.",
)
DATA_DIR = typer.Option(None, "--data-dir", help="Local benchmark files.")
QUIET = typer.Option(False, "--quiet", help="No progress bars.")
TRAINED = typer.Option(
    None,
    "--trained",
    help="A `mars train-mas` run: each role answered by its own policy's checkpoint, the "
    "workflow and its options as trained.",
)
TRAINED_STEP = typer.Option(
    None, "--trained-step", help="With --trained: the checkpoints of this step (default: last)."
)


@app.command("eval")
@model_options()
def eval_command(
    suite: str = SUITE,
    mas_name: str | None = MAS,
    role: list[str] = options.ROLE,
    role_sampling: list[str] = options.ROLE_SAMPLING,
    mas_option: list[str] = MAS_OPTION,
    grader: str = options.GRADER,
    judge_temperature: float = options.JUDGE_TEMPERATURE,
    judge_max_tokens: int = options.JUDGE_MAX_TOKENS,
    limit: int = LIMIT,
    epochs: int = EPOCHS,
    match_compute: Path = MATCH_COMPUTE,
    data_dir: Path = DATA_DIR,
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    quiet: bool = QUIET,
    trained: Path = TRAINED,
    trained_step: int = TRAINED_STEP,
) -> None:
    """Run reasoning suites through a MAS and grade every answer."""
    from harness.unscored import exit_if_unscored
    from mars.api.evaluate import EvalPlan, evaluate

    result = evaluate(
        EvalPlan(
            suites=suite,
            mas=mas_name,
            roles=role,
            role_sampling=role_sampling,
            mas_options=mas_option,
            grader=grader,
            judge_temperature=judge_temperature,
            judge_max_tokens=judge_max_tokens,
            limit=limit,
            epochs=epochs,
            match_compute=match_compute,
            data_dir=data_dir,
            model_options=model_options,
            sampling=sampling,
            out=out,
            run_dir=run_dir,
            quiet=quiet,
            trained=trained,
            trained_step=trained_step,
        )
    )
    exit_if_unscored(list(result.unscored))
