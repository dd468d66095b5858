"""`mars loop`: evaluate each new training checkpoint and keep a learning curve
(`mars.orchestration.loop.api`). See docs/loop.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

from core.model_options import ModelOptions, SamplingOptions
from mars.commands import options
from mars.commands.app import app
from mars.commands.logger_option import LOGGER
from mars.commands.model_options import model_options

EVAL_HELP = (
    "What to run on each checkpoint: a YAML/JSON file, or inline items separated by commas: "
    "arena:GAME:OPPONENT:EPISODES (e.g. arena:tic_tac_toe:mcts:100:20), "
    "eval:SUITE[:MAS[:LIMIT]] (e.g. eval:gsm8k:single:5), "
    "exploit:GAME[:SAMPLES] (e.g. exploit:kuhn_poker:16) and "
    "rating:GAME:EPISODES[:PREVIOUS] (e.g. rating:tic_tac_toe:10:2: the checkpoint's rating "
    "against random and the 2 latest earlier checkpoints)."
)


@app.command("loop")
@model_options(**options.LOOP_OPTIONS)
def loop_command(
    watch: Path = typer.Option(
        ..., "--watch", help="Folder of step_N/ checkpoints (or a training run holding one)."
    ),
    eval_spec: str = typer.Option(..., "--eval", help=EVAL_HELP),
    once: bool = typer.Option(False, "--once", help="Evaluate what is there now and exit."),
    poll: float = typer.Option(30.0, "--poll", min=0.1, help="Seconds between looks."),
    poll_timeout: float = typer.Option(
        86_400.0, "--timeout", min=0.0, help="Stop polling after this many seconds."
    ),
    prompt_style: str = typer.Option(
        None, "--prompt-style", help="Arena prompts: full | compact (default: the checkpoint's)."
    ),
    data_dir: Path = typer.Option(None, "--data-dir", help="Local benchmark files for eval."),
    baseline: Path = typer.Option(
        None, "--baseline", help="Also evaluate this model folder as step 0 (where training began)."
    ),
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    logger: str = LOGGER,
) -> None:
    """Serve every new complete checkpoint, run the evaluations, append a learning-curve row."""
    from mars.orchestration.loop.api import LoopPlan, loop

    unused = (options.NOT_FOR_THE_LOOP, options.NOT_FOR_THE_LOOP_SAMPLING)
    why = "the loop serves each checkpoint itself"
    options.refuse_unused("mars loop", (model_options, sampling), sum(unused, ()), why)
    loop(
        LoopPlan(
            watch=watch,
            evals=eval_spec,
            once=once,
            poll_s=poll,
            timeout_s=poll_timeout,
            prompt_style=prompt_style,
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            concurrency=model_options.concurrency,
            data_dir=data_dir,
            baseline=baseline,
            backend=model_options.backend,
            out=out,
            run_dir=run_dir,
            logger=logger,
        )
    )
