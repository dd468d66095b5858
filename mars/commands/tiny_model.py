"""`mars tiny-model build | pretrain`: make the embedded tiny Qwen3 checkpoint (no download), and
teach it the game reply format (`train_backend.pretrain.build`, imported inside the command)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core import tiny_model  # light: torch and transformers load inside its functions
from core.names import comma_list
from mars.commands.app import app

tiny_app = typer.Typer(
    help="The embedded tiny Qwen3 model (~1M parameters), built locally for demos and tests.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_OUT_HELP = "Folder to create (default: $MARS_CACHE_DIR or ~/.cache/mars, then tiny-model-v1)."
_STEPS_HELP = "Short pre-training steps on synthetic chats that teach the reply format (0: none)."


@tiny_app.command("build")
def build(
    out: Annotated[Path | None, typer.Option("--out", help=_OUT_HELP)] = None,
    seed: Annotated[int, typer.Option(help="Seed for the corpus, tokenizer and weights.")] = 0,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing tiny model folder.")] = False,
    pretrain_steps: Annotated[int, typer.Option(help=_STEPS_HELP)] = tiny_model.PRETRAIN_STEPS,
) -> None:
    """Train the tokenizer, initialise and briefly pre-train the model, save it in HF format."""
    target = out if out is not None else tiny_model.default_tiny_model_dir()
    folder = tiny_model.build_tiny_model(
        target, seed=seed, overwrite=overwrite, pretrain_steps=pretrain_steps
    )
    info = tiny_model.read_build_info(folder)
    typer.echo(str(folder))
    typer.echo(f"parameters: {info['parameters']:,}")


_PRETRAIN_OUT_HELP = (
    "Folder to write (default: the cached format-pre-trained tiny model beside the tiny model "
    "when --model is not given, else MODEL-format beside --model)."
)
_BaseModel = Annotated[
    Path | None, typer.Option("--model", help="Base model folder (default: the tiny model).")
]
_Recipe = Annotated[
    Path | None,
    typer.Option(help="YAML file of pre-training settings (the flags below override it)."),
]
_Games = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated games to make positions from "
        "(default tic_tac_toe,kuhn_poker,mini_hanabi)."
    ),
]
_Examples = Annotated[
    int | None, typer.Option(min=1, help="Training examples in all (default 6000).")
]
_Steps = Annotated[int | None, typer.Option(min=0, help="Optimizer steps, batch 16 (default 300).")]
_EvalPositions = Annotated[
    int | None,
    typer.Option(min=0, help="Held-out compact positions per game for the legal-move rate."),
]
_Seed = Annotated[
    int | None, typer.Option(help="Seed for positions, batches and weights (default 0).")
]
_Threads = Annotated[
    int, typer.Option(min=1, help="torch threads; 1 gives the same bytes on any machine.")
]


@tiny_app.command("pretrain")
def pretrain(
    model: _BaseModel = None,
    out: Annotated[Path | None, typer.Option("--out", help=_PRETRAIN_OUT_HELP)] = None,
    recipe: _Recipe = None,
    games: _Games = None,
    examples: _Examples = None,
    steps: _Steps = None,
    eval_positions: _EvalPositions = None,
    seed: _Seed = None,
    threads: _Threads = 1,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output folder.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress lines.")] = False,
) -> None:
    """Fine-tune on synthetic games so the model answers <answer>LEGAL MOVE</answer>; report the
    legal-move rate before and after on held-out positions (greedy replies)."""
    from train_backend.pretrain.build import PretrainSettings, load_recipe, pretrain_tiny_model

    names = None if games is None else comma_list(games, "--games")
    settings = load_recipe(recipe, threads=threads) if recipe else PretrainSettings(threads=threads)
    if out is None:
        out, overwrite = _pretrain_out(model, recipe, overwrite)

    def progress(step: int, loss: float) -> None:
        if not quiet and (step % 50 == 0 or step == total_steps):
            typer.echo(f"step {step}/{total_steps}  loss {loss:.3f}")

    total_steps = steps if steps is not None else settings.steps
    report = pretrain_tiny_model(
        model,
        out,
        games=names,
        examples=examples,
        steps=steps,
        seed=seed,
        overwrite=overwrite,
        eval_positions=eval_positions,
        settings=settings,
        on_step=progress,
        on_phase=None if quiet else (lambda what: typer.echo(f"{what}...")),
    )
    _print_pretrain_report(report)


def _pretrain_out(model: Path | None, recipe: Path | None, overwrite: bool) -> tuple[Path, bool]:
    """Where `pretrain` writes without --out, and whether it replaces what is there."""
    from train_backend.pretrain.build import default_pretrained_dir

    if model is None and recipe is not None:
        # Beside the cached default build, named after the recipe; never in its place.
        cached = default_pretrained_dir()
        return cached.with_name(f"{cached.name}-{recipe.stem}"), True
    if model is None:
        return default_pretrained_dir(), True  # the cache: always rebuilt in place
    base = model.expanduser().resolve()
    return base.with_name(f"{base.name}-format"), overwrite


def _print_pretrain_report(report: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    evaluation = report["evaluation"]
    assert isinstance(evaluation, dict)
    before, after = evaluation["before"], evaluation["after"]
    table = Table(title="legal-move rate on held-out positions (greedy replies)")
    for column in ("game/style", "n", "before", "after"):
        table.add_column(column)
    for key, group in after.items():
        label = "boxed answers" if key.startswith("arithmetic/") else key
        table.add_row(label, str(group["n"]), f"{before[key]['rate']:.3f}", f"{group['rate']:.3f}")
    Console().print(table)
    seconds = report["seconds"]
    assert isinstance(seconds, dict)
    typer.echo(
        f"time: {seconds['total']:.0f}s (data {seconds['data']:.0f}s, training "
        f"{seconds['train']:.0f}s, evaluation {seconds['eval']:.0f}s)"
    )
    typer.echo(str(report["out_dir"]))


app.add_typer(tiny_app, name="tiny-model")
