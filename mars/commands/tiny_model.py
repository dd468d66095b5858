"""`mars tiny-model build | pretrain | start`: make the embedded tiny Qwen3 checkpoint (no
download), teach it the game reply format (`train_backend.pretrain.build`), and build the named
start models of the miniatures (`train_backend.pretrain.starts`); both imported inside the
commands."""

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


_START_NAME_HELP = "A built-in start (none: list them): tiny_mas, tiny_mas_quick, ..."
_SET_HELP = (
    "KEY=VALUE: a recipe setting of the start changed (repeatable; the value read as YAML). "
    "A changed recipe is built into a folder of its own."
)
_CACHE_NAME_HELP = (
    "Cache folder tiny-model-v1-format-NAME (default: the start's own, or with --set its name "
    "and a digest of the recipe)."
)


@tiny_app.command("start")
def start(
    name: Annotated[str | None, typer.Argument(help=_START_NAME_HELP)] = None,
    sets: Annotated[list[str] | None, typer.Option("--set", help=_SET_HELP)] = None,
    cache_name: Annotated[str | None, typer.Option("--name", help=_CACHE_NAME_HELP)] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say where it is and whether it is built; build none.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress lines.")] = False,
) -> None:
    """Build a start model of the miniatures, once.

    A start is the tiny model taught a MAS workflow's reply formats (tiny_mas, the MAS
    miniature's; tiny_mas_quick, the tests') or the game format (tiny_selfplay), built into the
    MARS cache. A folder holding the same recipe is found, not rebuilt. Prints the folder last
    (for `mars train-mas --model`)."""
    import json
    import time

    from train_backend.pretrain.starts import BUILT_IN, built_in, start_with

    if name is None:
        width = max(len(key) for key in BUILT_IN)
        typer.echo("\n".join(f"{key:<{width}}  {what}" for key, what in BUILT_IN.items()))
        return
    chosen = built_in(name)
    if sets or cache_name:
        chosen = start_with(chosen, _recipe_changes(sets or []), cache_name)
    built = chosen.is_built()
    if dry_run:
        typer.echo(f"{name} ({chosen.kind}): {'built' if built else 'not built'}")
        typer.echo(f"recipe: {json.dumps(chosen.settings.model_dump(), sort_keys=True)}")
        typer.echo(str(chosen.folder))
        return
    total = chosen.steps()

    def progress(step: int, loss: float) -> None:
        if not quiet and step % 100 == 0:
            typer.echo(f"step {step}  loss {loss:.3f}")

    if not built and not quiet:
        typer.echo(f"building {name} ({chosen.kind}, up to {total} steps) into {chosen.folder}...")
    started = time.perf_counter()
    folder = chosen.build(progress)
    if not quiet:
        seconds = time.perf_counter() - started
        typer.echo(f"built in {seconds:.0f}s" if not built else "built already: found, not rebuilt")
    typer.echo(str(folder))


def _recipe_changes(items: list[str]) -> dict[str, object]:
    """`--set KEY=VALUE` items as a mapping, each value read as YAML (numbers stay numbers)."""
    import yaml

    from core.errors import MarsError

    changes: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise MarsError(f"--set {item!r}: write KEY=VALUE")
        try:
            changes[key.strip()] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            raise MarsError(f"--set {item!r}: the value is not readable as YAML") from None
    return changes


app.add_typer(tiny_app, name="tiny-model")
