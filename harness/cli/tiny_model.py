"""`mars tiny-model build`: make the embedded tiny Qwen3 checkpoint (no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness import tiny_model  # light: torch and transformers load inside its functions
from harness.cli.main import app

tiny_app = typer.Typer(
    help="The embedded tiny Qwen3 model (~1M parameters), built locally for demos and tests.",
    no_args_is_help=True,
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


app.add_typer(tiny_app, name="tiny-model")
