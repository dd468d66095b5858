"""`mars ratings RUN...`: ratings of every player in the arena records of some runs (checkpoints,
models and bots), per game, with 95% intervals. The fit is `games.ratings`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from core.names import comma_list
from mars.commands.app import app

RUNS_HELP = (
    "Arena run directories, or folders holding them (a loop's run directory, runs/): every "
    "arena run found directly inside, or one level deeper, is read."
)


def arena_runs(paths: list[Path]) -> list[Any]:
    """The arena runs named by `paths` (each a run directory or a folder of runs), each once."""
    from core.runstore import RUN_FILE, RunDir, list_runs

    found: dict[Path, RunDir] = {}
    for path in paths:
        if not path.exists():
            raise MarsError(f"no such run: {path}")
        if not path.is_dir():
            raise MarsError(f"{path} is not a run directory")
        candidates = [RunDir.open(path)] if (path / RUN_FILE).is_file() else []
        candidates += list_runs(path)
        if not candidates:
            raise MarsError(f"{path} is not a run directory and holds none")
        for run in candidates:
            if run.kind == "arena":
                found.setdefault(run.path.resolve(), run)
    return list(found.values())


def collect(runs: list[Any], games: set[str] | None) -> Any:
    from games.ratings import Collected, collect_matches

    collected = Collected()
    for run in runs:
        model = run.info().model
        collect_matches(run.records(), model=model, games=games, into=collected)
    return collected


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for game, fit in result["games"].items():
        anchor = f", {fit['anchor']} = {result['scale']['base']:g}" if fit.get("anchor") else ""
        table = Table(title=f"{game}: {fit['games']} games{anchor}")
        for column in ("#", "player", "rating", "95% CI", "games", "W/D/L", "score"):
            table.add_column(column)
        for row in fit["players"]:
            low, high = row["ci95"]
            interval = "-" if low is None else f"[{low:.0f}, {high:.0f}]"
            table.add_row(
                str(row["rank"]),
                row["player"],
                f"{row['rating']:.0f}",
                interval,
                str(row["games"]),
                f"{row['wins']}/{row['draws']}/{row['losses']}",
                f"{row['score']:.3f}",
            )
        console.print(table)
        if not fit["connected"]:
            console.print(
                f"{game}: some players never met, even through others: "
                "their ratings are not comparable across those groups"
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
    from games.ratings import rate

    games = set(comma_list(game, "--game")) if game else None
    found = arena_runs(runs)
    if not found:
        raise MarsError(f"no arena runs in {', '.join(str(p) for p in runs)}")
    collected = collect(found, games)
    result = rate(
        collected,
        bootstrap=bootstrap,
        seed=seed,
        prior_sd=prior_sd,
        base=base,
        anchor=anchor,
    )
    result["runs"] = [str(run.path) for run in found]
    _print_table(result)
    target = save or runs[-1] / "ratings.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(result, indent=2) + "\n")
    except OSError as exc:
        raise MarsError(f"cannot write {target}: {exc.strerror}") from exc
    print(f"wrote {target}")
