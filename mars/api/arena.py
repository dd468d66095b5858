"""`mars.arena`: a player against an opponent in one game, both seats, in a resumable run
directory (`mars.selfplay` is in mars/api/selfplay.py).

`mars arena` parses its options into an `ArenaPlan` and calls it; a notebook calls it directly.
Bots are built (and their policies solved) and every flag checked before any server starts or
the run directory changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions
from core.names import counted
from mars.api.game_runs import check_model_flags, close_endpoint, progress_ticker
from mars.api.plans import build_plan
from mars.api.results import RunResult, arena_figures, finished_run

if TYPE_CHECKING:
    from core.endpoint import EndpointConfig, GenerationConfig
    from core.runstore import RunDir


@dataclasses.dataclass(frozen=True)
class ArenaPlan:
    """What `mars arena` plays: `player` against `opponent` at `game`, `episodes` per seat.

    A player is `llm` (the model of `model_options`), `llm:PATH` (a checkpoint served for the
    run), `llm:NAME@URL`, or a bot (`random`, `mcts:SIMS`, `cfr:ITERS`, `nash`); the opponent may
    also be `self`. `seats`: both | first | second; `invalid`: penalty | retry:K; `prompt_style`:
    full | compact; `rules`: default | marshal; `sampling.seed` is the first episode's seed."""

    game: str
    opponent: str
    player: str = "llm"
    episodes: int = 100
    seats: str = "both"
    invalid: str = "penalty"
    prompt_style: str = "full"
    rules: str = "default"
    parse_mode: str | None = None
    model_options: ModelOptions = dataclasses.field(default_factory=ModelOptions)
    sampling: SamplingOptions = dataclasses.field(default_factory=SamplingOptions)
    out: Path = Path("runs")
    run_dir: Path | None = None
    quiet: bool = False
    model_label: str | None = None


@dataclasses.dataclass(frozen=True)
class _Arena:
    """An ArenaPlan checked and resolved: what the run needs, nothing started yet."""

    plan: ArenaPlan
    spec: Any
    rules: Any
    config: Any  # games.arena.ArenaConfig
    named: dict[str, Any]  # `llm:SPEC` text -> its model
    wants_main: bool  # a seat is `llm` or `self`: the model of model_options
    model_options: ModelOptions
    bots: dict[str, Any]
    gen: Any
    run_config: dict[str, Any]
    identity: dict[str, Any]


def arena(plan: ArenaPlan | None = None, /, **kwargs: Any) -> RunResult:
    """Play `plan` (or the plan the keyword arguments build): each seat's win, draw and loss
    rates and mean return. A rerun with the same run folder resumes."""
    from core.lifecycle import run_lifecycle
    from games.arena import record_key

    plan = build_plan(ArenaPlan, plan, kwargs)
    prepared = _prepare_arena(plan)
    slug = f"{prepared.spec.name}-{plan.player}-vs-{plan.opponent}"
    # The identity is checked on entering, before anything in the run directory changes.
    with run_lifecycle(
        out=plan.out, run_dir=plan.run_dir, kind="arena", slug=slug, identity=prepared.identity
    ) as life:
        summary, errors, unscored = _play_arena(prepared, life)
    print_arena_table(summary)
    print_ending(errors, life.path)
    return finished_run(life, "arena", summary, arena_figures, unscored, record_key)


def _prepare_arena(plan: ArenaPlan) -> _Arena:
    """Every check `mars arena` makes before it starts anything, and the run's identity."""
    from core.runstore import identity_of, model_identity
    from games.arena import ArenaConfig
    from games.engine import EpisodeOptions
    from games.players import PlayerContext, make_player, needs_model
    from games.players.llm import named_models
    from games.rules import named_rules
    from games.spec import get_game

    check_episodes(plan.episodes)
    spec = get_game(plan.game)
    rules = named_rules(plan.rules, parse_mode=plan.parse_mode)
    episode_options = EpisodeOptions(
        prompt_style=plan.prompt_style,  # type: ignore[arg-type]
        invalid=plan.invalid,
        rules=rules,
    )
    config = ArenaConfig(
        episodes=plan.episodes,
        seats=plan.seats,  # type: ignore[arg-type]
        first_seed=plan.sampling.seed,
        concurrency=plan.model_options.concurrency,
        options=episode_options,
    )
    # `llm:SPEC` seats bring their own model; `llm` and `self` use --model/--base-url.
    seats = (plan.player, plan.opponent)
    named = named_models(list(seats))
    wants_main = any(needs_model(name) and ":" not in name for name in seats)
    model_options = check_model_flags(wants_main, plan.model_options)
    # Bots are built (and policies solved) before any server starts, so bad input fails fast.
    bot_context = PlayerContext(spec=spec)
    bots = {name: make_player(name, bot_context) for name in seats if not needs_model(name)}
    gen = plan.sampling.generation()
    run_config = _arena_config(plan, spec, rules, gen if wants_main or named else None)
    identity = identity_of(
        "arena",
        run_config,
        resumable=("episodes_per_seat", "seats", "first_seed", "concurrency"),
        model=model_identity(model_options.model, model_options.base_url) if wants_main else None,
    )
    return _Arena(
        plan, spec, rules, config, named, wants_main, model_options, bots, gen, run_config, identity
    )


def check_episodes(episodes: int) -> None:
    if episodes < 1:
        raise MarsError(f"--episodes must be at least 1, not {episodes}")


def _arena_config(plan: ArenaPlan, spec: Any, rules: Any, gen: Any) -> dict[str, Any]:
    """run.json's config: everything that decides what a record means."""
    return {
        "game": spec.describe(),
        "player": plan.player,
        "opponent": plan.opponent,
        "episodes_per_seat": plan.episodes,
        "seats": plan.seats,
        "first_seed": plan.sampling.seed,
        "invalid": plan.invalid,
        "prompt_style": plan.prompt_style,
        "rules": rules.describe(),
        "concurrency": plan.model_options.concurrency,
        "generation": gen.model_dump() if gen is not None else None,
    }


def _play_arena(a: _Arena, life: Any) -> tuple[dict[str, Any], int, list[str]]:
    """Inside the run's lifecycle: play what is missing, write the summary and the status;
    (the summary, failed episodes, a line per seat without a score)."""
    import asyncio

    from core.runstore import RunStatus
    from games.arena import record_key
    from harness.unscored import unscored_seats

    run, plan = life.run, a.plan
    done = life.resume(record_key)
    total = len(a.config.seat_indices()) * plan.episodes
    todo = total - sum(1 for key in done if key[0] == a.spec.name)
    if done:
        print(f"resuming {run.path}: {counted(len(done), 'record')} kept, {todo} to run")
    started = time.perf_counter()
    # A pinned server is checked against the sampling this run asks for (`gen`).
    with (
        _maybe_endpoint(a.wants_main, a.model_options, run, a.gen) as endpoint_config,
        _named_endpoints(a.named, a.model_options, run, a.gen) as named_configs,
    ):
        life.start(
            config=a.run_config,
            model=endpoint_config.model if endpoint_config else None,
            endpoint=endpoint_config.public() if endpoint_config else None,
            seeds={"first_episode_seed": plan.sampling.seed},
        )
        played = asyncio.run(_play(a, run, done, todo, endpoint_config, named_configs))
    summary = _arena_summary(a, run, played, started, endpoint_config)
    errors = sum(stats["errors"] for stats in summary["seats"].values())
    unscored = unscored_seats(summary)
    run.write_summary(summary)
    if unscored and len(unscored) == len(summary["seats"]):
        life.finish(RunStatus.FAILED)  # no seat was scored
    else:
        life.finish(RunStatus.after(errors))
    return summary, errors, unscored


@dataclasses.dataclass(frozen=True)
class _Played:
    identities: dict[str, str]  # player / opponent -> who played it (a bot's settings, a model)
    usage: dict[str, Any] | None  # the model of model_options' calls
    usage_by_model: dict[str, Any]  # the `llm:SPEC` models' own endpoints


async def _play(
    a: _Arena,
    run: RunDir,
    done: set[Any],
    todo: int,
    endpoint_config: EndpointConfig | None,
    named_configs: dict[str, EndpointConfig],
) -> _Played:
    from core.endpoint import Endpoint
    from games.arena import run_arena
    from games.players import PlayerContext, make_player
    from games.records import RecordWriter

    plan, spec = a.plan, a.spec
    endpoint = Endpoint(endpoint_config) if endpoint_config else None
    others = {spec_text: Endpoint(cfg) for spec_text, cfg in named_configs.items()}
    label = plan.model_label or (_main_label(a.model_options) if endpoint else None)
    context = PlayerContext(
        spec=spec,
        endpoint=endpoint,
        gen=a.gen,
        model_label=label,
        named_models={text: (others[text], a.named[text].label) for text in others},
    )
    built = {
        name: a.bots.get(name) or make_player(name, context)
        for name in (plan.player, plan.opponent)
    }
    identities = {"player": built[plan.player].identity, "opponent": built[plan.opponent].identity}
    usage: dict[str, Any] | None = None
    usage_by_model: dict[str, Any] = {}
    try:
        with progress_ticker(todo, plan.quiet, f"{spec.name} episodes") as tick:
            await run_arena(
                spec,
                built[plan.player],
                built[plan.opponent],
                a.config,
                sink=RecordWriter(run),
                done=done,
                on_record=tick,
            )
    finally:
        if endpoint is not None:
            usage = await close_endpoint(endpoint)
        for text, other in others.items():
            usage_by_model[a.named[text].label] = await close_endpoint(other)
    return _Played(identities, usage, usage_by_model)


def _arena_summary(
    a: _Arena, run: RunDir, played: _Played, started: float, endpoint_config: Any
) -> dict[str, Any]:
    from core.usage import add_usage
    from games.arena import summarize

    summary = summarize(a.spec, a.plan.player, a.plan.opponent, run.records())
    summary["player_id"] = played.identities["player"]
    summary["opponent_id"] = played.identities["opponent"]
    summary["wall_s"] = round(time.perf_counter() - started, 3)
    summary["rules"] = a.rules.describe()
    if endpoint_config is not None:
        summary["model"] = endpoint_config.model
    earlier = run.summary() or {}  # usage is added up over the run's attempts, like eval's
    if played.usage is not None:
        summary["usage"] = add_usage(earlier.get("usage") or {}, played.usage)
    if played.usage_by_model:
        summary["usage_by_model"] = add_usage(
            earlier.get("usage_by_model") or {}, played.usage_by_model
        )
    return summary


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
    from core.server_commands import model_argument

    return model_argument(model_options.model or default_model())


def print_arena_table(summary: dict[str, Any]) -> None:
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


def print_ending(errors: int, path: Path) -> None:
    if errors:
        print(f"{errors} episodes failed (model errors); rerun with --run-dir {path} to redo")
    print(f"run dir: {path}")
