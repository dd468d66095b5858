"""`mars arena` (a player against an opponent in one game) and `mars selfplay` (one model in both
seats, writing the per-turn trajectories the trainers read). Both write a resumable run directory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions
from core.names import comma_list, counted
from mars.commands import options
from mars.commands.app import app
from mars.commands.game_commands import (
    INVALID_HELP,
    LABEL_HELP,
    PLAYER_HELP,
    SEATS_HELP,
    STYLE_HELP,
    check_model_flags,
    progress_ticker,
)
from mars.commands.model_options import model_options

if TYPE_CHECKING:
    from core.endpoint import EndpointConfig, GenerationConfig
    from core.runstore import RunDir


@contextlib.contextmanager
def _maybe_endpoint(
    wanted: bool, model_options: ModelOptions, run: RunDir, gen: GenerationConfig
) -> Iterator[EndpointConfig | None]:
    """The model endpoint when a model player is in the game, else nothing (no server started).

    Without --base-url, --model (the embedded tiny model by default) is served for the length
    of the command.
    """
    if not wanted:
        yield None
        return
    from core.model_options import open_endpoint

    with open_endpoint(model_options, run, gen) as config:
        yield config


@contextlib.contextmanager
def _named_endpoints(
    named: dict[str, Any], model_options: ModelOptions, run: RunDir, gen: GenerationConfig
) -> Iterator[dict[str, EndpointConfig]]:
    """An endpoint per `llm:SPEC` model (SPEC -> config): the URL given, or the folder served
    for the length of the command, like --model."""
    if not named:
        yield {}
        return
    import dataclasses

    from core.model_options import open_endpoint

    with contextlib.ExitStack() as stack:
        yield {
            text: stack.enter_context(
                open_endpoint(
                    dataclasses.replace(model_options, model=spec.model, base_url=spec.base_url),
                    run,
                    gen,
                )
            )
            for text, spec in named.items()
        }


def _main_label(model_options: ModelOptions) -> str:
    """Who --model is in records: the name sent to --base-url, else the served folder's path."""
    if model_options.base_url:
        return str(model_options.model)
    from core.model_access import default_model
    from core.servers import model_argument

    return model_argument(model_options.model or default_model())


def _print_arena_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from harness.unscored import NO_SCORE

    table = Table(title=f"{summary['player']} vs {summary['opponent']} at {summary['game']}")
    columns = (
        "seat",
        "n",
        "win",
        "draw",
        "loss",
        "mean return",
        "normalized return",
        "invalid",
        "tokens a turn",
    )
    for column in columns:  # headers wrap at their spaces in a narrow terminal, never cut
        table.add_column(column, overflow="fold")
    for seat, stats in summary["seats"].items():
        if not stats["n"]:  # no graded episode: no score (never 0)
            table.add_row(seat, "0", NO_SCORE, *["-"] * (len(columns) - 3))
            continue
        table.add_row(
            seat,
            str(stats["n"]),
            f"{stats['win']:.3f}",
            f"{stats['draw']:.3f}",
            f"{stats['loss']:.3f}",
            f"{stats['mean_return']:+.3f}",
            f"{stats['normalized_return']:.1f}",
            f"{stats['invalid_rate']:.3f}",
            f"{stats['mean_tokens_per_turn']:.0f}",
        )
    Console().print(table)


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
    import asyncio

    from core.lifecycle import run_lifecycle
    from core.runstore import RunStatus, identity_of, model_identity
    from core.usage import add_usage
    from games.arena import ArenaConfig, record_key, run_arena, summarize
    from games.engine import EpisodeOptions
    from games.players import PlayerContext, make_player, needs_model
    from games.players.llm import named_models
    from games.rules import named_rules
    from games.spec import get_game
    from harness.unscored import exit_if_unscored, unscored_seats

    spec = get_game(game)
    rules = named_rules(rules_name, parse_mode=parse_mode)
    episode_options = EpisodeOptions(
        prompt_style=prompt_style,  # type: ignore[arg-type]
        invalid=invalid,
        rules=rules,
    )
    seed, concurrency = sampling.seed, model_options.concurrency
    config = ArenaConfig(
        episodes=episodes,
        seats=seats,  # type: ignore[arg-type]
        first_seed=seed,
        concurrency=concurrency,
        options=episode_options,
    )
    # `llm:SPEC` seats bring their own model; `llm` and `self` use --model/--base-url.
    named = named_models([player, opponent])
    wants_main = any(needs_model(name) and ":" not in name for name in (player, opponent))
    wants_model = wants_main or bool(named)
    model_options = check_model_flags(wants_main, model_options)
    # Bots are built (and policies solved) before any server starts, so bad input fails fast.
    bot_context = PlayerContext(spec=spec)
    bots = {
        name: make_player(name, bot_context) for name in (player, opponent) if not needs_model(name)
    }

    gen = sampling.generation()
    run_config = {
        "game": spec.describe(),
        "player": player,
        "opponent": opponent,
        "episodes_per_seat": episodes,
        "seats": seats,
        "first_seed": seed,
        "invalid": invalid,
        "prompt_style": prompt_style,
        "rules": rules.describe(),
        "concurrency": concurrency,
        "generation": gen.model_dump() if wants_model else None,
    }
    identity = identity_of(
        "arena",
        run_config,
        resumable=("episodes_per_seat", "seats", "first_seed", "concurrency"),
        model=model_identity(model_options.model, model_options.base_url) if wants_main else None,
    )
    slug = f"{spec.name}-{player}-vs-{opponent}"
    # The identity is checked on entering, before anything in the run directory changes.
    with run_lifecycle(
        out=out, run_dir=run_dir, kind="arena", slug=slug, identity=identity
    ) as life:
        run = life.run
        done = life.resume(record_key)
        total = len(config.seat_indices()) * episodes
        todo = total - sum(1 for key in done if key[0] == spec.name)
        if done:
            print(f"resuming {run.path}: {counted(len(done), 'record')} kept, {todo} to run")
        started = time.perf_counter()
        usage: dict[str, Any] | None = None
        usage_by_model: dict[str, Any] = {}  # the `llm:SPEC` models' own endpoints
        identities = {"player": player, "opponent": opponent}
        # A pinned server is checked against the sampling this run asks for (`gen`).
        with (
            _maybe_endpoint(wants_main, model_options, run, gen) as endpoint_config,
            _named_endpoints(named, model_options, run, gen) as named_configs,
        ):
            life.start(
                config=run_config,
                model=endpoint_config.model if endpoint_config else None,
                endpoint=endpoint_config.public() if endpoint_config else None,
                seeds={"first_episode_seed": seed},
            )

            async def play() -> None:
                nonlocal usage
                from core.endpoint import Endpoint
                from games.records import RecordWriter

                endpoint = Endpoint(endpoint_config) if endpoint_config else None
                others = {spec_text: Endpoint(cfg) for spec_text, cfg in named_configs.items()}
                label = model_label or (_main_label(model_options) if endpoint else None)
                context = PlayerContext(
                    spec=spec,
                    endpoint=endpoint,
                    gen=gen,
                    model_label=label,
                    named_models={text: (others[text], named[text].label) for text in others},
                )
                built = {
                    name: bots.get(name) or make_player(name, context)
                    for name in (player, opponent)
                }
                identities.update(player=built[player].identity, opponent=built[opponent].identity)
                try:
                    with progress_ticker(todo, quiet, f"{spec.name} episodes") as tick:
                        await run_arena(
                            spec,
                            built[player],
                            built[opponent],
                            config,
                            sink=RecordWriter(run),
                            done=done,
                            on_record=tick,
                        )
                finally:
                    if endpoint is not None:
                        usage = {
                            "by_role": endpoint.ledger.by_role(),
                            "totals": endpoint.ledger.totals(),
                        }
                        await endpoint.aclose()
                    for text, other in others.items():
                        usage_by_model[named[text].label] = {
                            "by_role": other.ledger.by_role(),
                            "totals": other.ledger.totals(),
                        }
                        await other.aclose()

            asyncio.run(play())
        summary = summarize(spec, player, opponent, run.records())
        summary["player_id"], summary["opponent_id"] = identities["player"], identities["opponent"]
        summary["wall_s"] = round(time.perf_counter() - started, 3)
        summary["rules"] = rules.describe()
        if endpoint_config is not None:
            summary["model"] = endpoint_config.model
        earlier = run.summary() or {}  # usage is added up over the run's attempts, like eval's
        if usage is not None:
            summary["usage"] = add_usage(earlier.get("usage") or {}, usage)
        if usage_by_model:
            summary["usage_by_model"] = add_usage(
                earlier.get("usage_by_model") or {}, usage_by_model
            )
        errors = sum(stats["errors"] for stats in summary["seats"].values())
        unscored = unscored_seats(summary)
        run.write_summary(summary)
        if unscored and len(unscored) == len(summary["seats"]):
            life.finish(RunStatus.FAILED)  # no seat was scored
        else:
            life.finish(RunStatus.after(errors))
    _print_arena_table(summary)
    if errors:
        print(f"{errors} episodes failed (model errors); rerun with --run-dir {run.path} to redo")
    print(f"run dir: {run.path}")
    exit_if_unscored(unscored)


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
    import asyncio

    from core.lifecycle import run_lifecycle
    from core.model_options import open_endpoint
    from core.runstore import RunStatus, identity_of, model_identity
    from core.usage import add_usage
    from games.engine import EpisodeOptions
    from games.players import PlayerContext, make_player
    from games.selfplay import SelfPlayConfig, run_selfplay, selfplay_key, summarize_selfplay
    from games.spec import get_game
    from harness.unscored import NO_SCORE, exit_if_unscored, no_score_line

    names = comma_list(games, "--games")
    if not names:
        raise MarsError("--games needs at least one game name")
    specs = [get_game(name) for name in names]
    model_options = check_model_flags(True, model_options)
    seed = sampling.seed
    config = SelfPlayConfig(
        episodes=episodes,
        first_seed=seed,
        concurrency=model_options.concurrency,
        options=EpisodeOptions(prompt_style=prompt_style, invalid=invalid),  # type: ignore[arg-type]
    )
    gen = sampling.generation()
    run_config = {
        "games": [spec.describe() for spec in specs],
        "episodes_per_game": episodes,
        "first_seed": seed,
        "invalid": invalid,
        "prompt_style": prompt_style,
        "concurrency": model_options.concurrency,
        "generation": gen.model_dump(),
    }
    identity = identity_of(
        "selfplay",
        run_config,
        resumable=("episodes_per_game", "concurrency"),
        model=model_identity(model_options.model, model_options.base_url),
    )
    slug = "-".join(s.name for s in specs)
    with run_lifecycle(
        out=out, run_dir=run_dir, kind="selfplay", slug=slug, identity=identity
    ) as life:
        run = life.run
        done = life.resume(selfplay_key)
        wanted = {(spec.name, s) for spec in specs for s in range(seed, seed + episodes)}
        todo = len(wanted - done)
        if done:
            print(f"resuming {run.path}: {counted(len(done), 'record')} kept, {todo} to run")
        started = time.perf_counter()
        usage: dict[str, Any] | None = None
        with open_endpoint(model_options, run, gen) as endpoint_config:
            life.start(
                config=run_config,
                model=endpoint_config.model,
                endpoint=endpoint_config.public(),
                seeds={"first_episode_seed": seed},
            )

            async def play() -> None:
                nonlocal usage
                from core.endpoint import Endpoint
                from games.records import RecordWriter

                endpoint = Endpoint(endpoint_config)
                model_player = make_player(
                    "self", PlayerContext(spec=specs[0], endpoint=endpoint, gen=gen)
                )
                try:
                    with progress_ticker(todo, quiet, "self-play episodes") as tick:
                        await run_selfplay(
                            specs,
                            model_player,
                            config,
                            sink=RecordWriter(run),
                            done=done,
                            on_record=tick,
                        )
                finally:
                    usage = {
                        "by_role": endpoint.ledger.by_role(),
                        "totals": endpoint.ledger.totals(),
                    }
                    await endpoint.aclose()

            asyncio.run(play())
        summary = summarize_selfplay(specs, run.records())
        summary["model"] = endpoint_config.model
        summary["wall_s"] = round(time.perf_counter() - started, 3)
        if usage is not None:  # added up over the run's attempts, like eval's usage.json
            summary["usage"] = add_usage((run.summary() or {}).get("usage") or {}, usage)
        errors = sum(game["errors"] for game in summary["games"].values())
        # A game whose every episode failed has no trajectories and no returns: no score.
        unscored = [
            no_score_line(name, stats["errors"], "episode", None)
            for name, stats in summary["games"].items()
            if not stats["episodes"]
        ]
        run.write_summary(summary)
        if unscored and len(unscored) == len(summary["games"]):
            life.finish(RunStatus.FAILED)
        else:
            life.finish(RunStatus.after(errors))
    for name, stats in summary["games"].items():
        returns = ", ".join(f"{value:+.3f}" for value in stats["mean_return"])
        if not stats["episodes"]:
            returns = NO_SCORE
        print(
            f"{name}: {stats['episodes']} episodes, mean return per seat [{returns}], "
            f"invalid {stats['invalid_episode_rate']:.3f}, {stats['turns']} turns"
        )
    if errors:
        print(f"{errors} episodes failed (model errors); rerun with --run-dir {run.path} to redo")
    print(f"run dir: {run.path}")
    exit_if_unscored(unscored)
