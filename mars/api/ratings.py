"""`mars.ratings`: Bradley-Terry ratings (Elo scale) of every player in the arena records of some
runs (checkpoints, models and bots), per game, with 95% intervals. The fit is `games.ratings`;
`mars ratings RUN...` calls `ratings`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import MarsError
from mars.api.plans import names
from mars.api.results import Figure


@dataclasses.dataclass(frozen=True)
class RatingsResult:
    """`figures`: per game, each player's rating with its 95% interval and the games it played;
    `data` is ratings.json as written to `saved`."""

    figures: dict[str, dict[str, Figure]]
    data: dict[str, Any]
    saved: Path


def ratings(
    runs: Path | str | Sequence[Path | str],
    game: str | Sequence[str] | None = None,
    anchor: str | None = None,
    bootstrap: int = 0,
    seed: int = 0,
    prior_sd: float = 400.0,
    base: float = 1000.0,
    save: Path | str | None = None,
) -> RatingsResult:
    """Rate every player of the arena runs in `runs` (run folders, or folders holding them: a
    loop's run folder, runs/), only `game`'s games if given; `anchor` pins a player at `base`;
    `bootstrap` > 0 resamples games for the interval. Printed; written to `save` (default:
    ratings.json in the last of `runs`)."""
    from games.ratings import rate

    paths = [Path(runs)] if isinstance(runs, str | Path) else [Path(run) for run in runs]
    games = set(names(game, "--game")) if game else None
    found = arena_runs(paths)
    if not found:
        raise MarsError(f"no arena runs in {', '.join(str(p) for p in paths)}")
    result = rate(
        collect(found, games),
        bootstrap=bootstrap,
        seed=seed,
        prior_sd=prior_sd,
        base=base,
        anchor=anchor,
    )
    result["runs"] = [str(run.path) for run in found]
    print_ratings(result)
    target = Path(save) if save is not None else paths[-1] / "ratings.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(result, indent=2) + "\n")
    except OSError as exc:
        raise MarsError(f"cannot write {target}: {exc.strerror}") from exc
    print(f"wrote {target}")
    return RatingsResult(rating_figures(result), result, target)


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


def rating_figures(result: dict[str, Any]) -> dict[str, dict[str, Figure]]:
    """Per game, each player's rating, its 95% interval (None when not estimated) and games."""
    figures: dict[str, dict[str, Figure]] = {}
    for game, fit in result["games"].items():
        figures[game] = {}
        for row in fit["players"]:
            low, high = row["ci95"]
            interval = None if low is None or high is None else (float(low), float(high))
            figures[game][row["player"]] = Figure(row["rating"], interval, row["games"])
    return figures


def print_ratings(result: dict[str, Any]) -> None:
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
