"""`mars ratings RUN...`: ratings of every player in the arena records of some runs (checkpoints,
models and bots), per game, with 95% intervals (`mars.api.ratings`)."""

from __future__ import annotations

from pathlib import Path

import typer

from mars.commands.app import app

RUNS_HELP = (
    "Arena run directories, or folders holding them (a loop's run directory, runs/): every "
    "arena run found directly inside, or one level deeper, is read."
)


@app.command("ratings")
def ratings_command(
    runs: list[Path] = typer.Argument(..., help=RUNS_HELP),
    game: str = typer.Option(None, "--game", help="Only these games (comma separated)."),
    anchor: str = typer.Option(
        None, "--anchor", help="Pin this player (e.g. random) at the base rating."
    ),
    bootstrap: int = typer.Option(
        0,
        "--bootstrap",
        min=0,
        help="0: the posterior's 95% interval; N: a percentile bootstrap over games, N resamples.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    prior_sd: float = typer.Option(
        400.0, "--prior-sd", help="Prior sd of each rating, Elo points (keeps unbeaten finite)."
    ),
    base: float = typer.Option(1000.0, "--base", help="Mean rating (or the anchor's)."),
    save: Path = typer.Option(
        None, "--save", help="JSON file to write (default: ratings.json in the last RUN)."
    ),
) -> None:
    """Bradley-Terry ratings (Elo scale) of every player in arena records, per game, with 95%
    intervals."""
    from mars.api.ratings import ratings

    ratings(
        runs,
        game=game,
        anchor=anchor,
        bootstrap=bootstrap,
        seed=seed,
        prior_sd=prior_sd,
        base=base,
        save=save,
    )
