"""`mars arena` (a player against an opponent in one game) and `mars selfplay` (one model in both
seats, writing the per-turn trajectories the trainers read): `mars.api.arena`."""

from __future__ import annotations

from pathlib import Path

import typer

from core.model_options import ModelOptions, SamplingOptions
from mars.commands import options
from mars.commands.app import app
from mars.commands.game_commands import (
    INVALID_HELP,
    LABEL_HELP,
    PLAYER_HELP,
    SEATS_HELP,
    STYLE_HELP,
)
from mars.commands.model_options import model_options


@app.command("arena")
@model_options(helps={"seed": "First episode seed (seeds seed..seed+N-1)."})
def arena_command(
    game: str = typer.Option(..., "--game", help="tic_tac_toe, connect_four, kuhn_poker, ..."),
    player: str = typer.Option("llm", "--player", help=PLAYER_HELP),
    opponent: str = typer.Option(..., "--opponent", help="Same choices, plus self (the model)."),
    episodes: int = typer.Option(100, "--episodes", min=1, help="Episodes per seat."),
    seats: str = typer.Option("both", "--seats", help=SEATS_HELP),
    invalid: str = typer.Option("penalty", "--invalid", help=INVALID_HELP),
    prompt_style: str = typer.Option("full", "--prompt-style", help=STYLE_HELP),
    rules_name: str = typer.Option(
        "default",
        "--rules",
        help="default | marshal: the MARSHAL code's dealing, parsing and scoring (docs/parity.md).",
    ),
    parse_mode: str = typer.Option(
        None, "--parse-mode", help="lenient | strict (default: the --rules' choice)."
    ),
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    model_label: str = typer.Option(None, "--model-label", help=LABEL_HELP),
) -> None:
    """Play PLAYER against OPPONENT, N episodes per seat, and score each seat."""
    from harness.unscored import exit_if_unscored
    from mars.api.arena import ArenaPlan, arena

    result = arena(
        ArenaPlan(
            game=game,
            player=player,
            opponent=opponent,
            episodes=episodes,
            seats=seats,
            invalid=invalid,
            prompt_style=prompt_style,
            rules=rules_name,
            parse_mode=parse_mode,
            model_options=model_options,
            sampling=sampling,
            out=out,
            run_dir=run_dir,
            quiet=quiet,
            model_label=model_label,
        )
    )
    exit_if_unscored(list(result.unscored))


@app.command("selfplay")
@model_options(
    defaults={"temperature": 0.6, "top_p": 0.99},
    helps={"seed": "First episode seed (seeds seed..seed+N-1)."},
)
def selfplay_command(
    games: str = typer.Option(
        "tic_tac_toe,kuhn_poker,mini_hanabi", "--games", help="Comma-separated games."
    ),
    episodes: int = typer.Option(16, "--episodes", min=1, help="Episodes per game."),
    invalid: str = typer.Option("penalty", "--invalid", help=INVALID_HELP),
    prompt_style: str = typer.Option("full", "--prompt-style", help=STYLE_HELP),
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """One model in both seats: per-turn trajectories (prompt, reply, reward, tokens) per game."""
    from harness.unscored import exit_if_unscored
    from mars.api.selfplay import SelfplayPlan, selfplay

    result = selfplay(
        SelfplayPlan(
            games=games,
            episodes=episodes,
            invalid=invalid,
            prompt_style=prompt_style,
            model_options=model_options,
            sampling=sampling,
            out=out,
            run_dir=run_dir,
            quiet=quiet,
        )
    )
    exit_if_unscored(list(result.unscored))
