"""`mars.selfplay`: one model in both seats of each game, writing the per-turn trajectories the
trainers read, in a resumable run directory. `mars selfplay` parses its options into a
`SelfplayPlan` and calls it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions
from core.names import counted
from mars.api import arena as arena_api
from mars.api.game_runs import check_model_flags, close_endpoint, progress_ticker
from mars.api.plans import build_plan, names
from mars.api.results import RunResult, finished_run, selfplay_figures

if TYPE_CHECKING:
    from core.endpoint import EndpointConfig
    from core.runstore import RunDir

# `mars selfplay`'s own sampling defaults (the paper's self-play temperature and top-p).
SELFPLAY_SAMPLING = SamplingOptions(temperature=0.6, top_p=0.99)


@dataclasses.dataclass(frozen=True)
class SelfplayPlan:
    """What `mars selfplay` plays: the model in both seats, `episodes` per game of `games`
    (comma-separated text or a sequence of names)."""

    games: str | Sequence[str] = "tic_tac_toe,kuhn_poker,mini_hanabi"
    episodes: int = 16
    invalid: str = "penalty"
    prompt_style: str = "full"
    model_options: ModelOptions = dataclasses.field(default_factory=ModelOptions)
    sampling: SamplingOptions = SELFPLAY_SAMPLING
    out: Path = Path("runs")
    run_dir: Path | None = None
    quiet: bool = False


def selfplay(plan: SelfplayPlan | None = None, /, **kwargs: Any) -> RunResult:
    """Play `plan` (or the plan the keyword arguments build): per game, the episodes' mean
    return per seat; the records are the per-turn trajectories. A rerun resumes."""
    from core.lifecycle import run_lifecycle
    from games.selfplay import selfplay_key

    plan = build_plan(SelfplayPlan, plan, kwargs)
    prepared = _prepare_selfplay(plan)
    slug = "-".join(s.name for s in prepared.specs)
    with run_lifecycle(
        out=plan.out, run_dir=plan.run_dir, kind="selfplay", slug=slug, identity=prepared.identity
    ) as life:
        summary, errors, unscored = _play_selfplay(prepared, life)
    _print_selfplay(summary)
    arena_api.print_ending(errors, life.path)
    return finished_run(life, "selfplay", summary, selfplay_figures, unscored, selfplay_key)


@dataclasses.dataclass(frozen=True)
class _Selfplay:
    """A SelfplayPlan checked and resolved: what the run needs, nothing started yet."""

    plan: SelfplayPlan
    specs: list[Any]
    model_options: ModelOptions  # the served model's name asked when only a URL was given
    config: Any  # games.selfplay.SelfPlayConfig
    gen: Any
    run_config: dict[str, Any]
    identity: dict[str, Any]


def _prepare_selfplay(plan: SelfplayPlan) -> _Selfplay:
    """Every check `mars selfplay` makes before it starts anything, and the run's identity."""
    from core.runstore import identity_of, model_identity
    from games.engine import EpisodeOptions
    from games.selfplay import SelfPlayConfig
    from games.spec import get_game

    arena_api.check_episodes(plan.episodes)
    game_names = names(plan.games, "--games")
    if not game_names:
        raise MarsError("--games needs at least one game name")
    specs = [get_game(name) for name in game_names]
    model_options = check_model_flags(True, plan.model_options)
    seed = plan.sampling.seed
    config = SelfPlayConfig(
        episodes=plan.episodes,
        first_seed=seed,
        concurrency=model_options.concurrency,
        options=EpisodeOptions(prompt_style=plan.prompt_style, invalid=plan.invalid),  # type: ignore[arg-type]
    )
    gen = plan.sampling.generation()
    run_config = {
        "games": [spec.describe() for spec in specs],
        "episodes_per_game": plan.episodes,
        "first_seed": seed,
        "invalid": plan.invalid,
        "prompt_style": plan.prompt_style,
        "concurrency": model_options.concurrency,
        "generation": gen.model_dump(),
    }
    identity = identity_of(
        "selfplay",
        run_config,
        resumable=("episodes_per_game", "concurrency"),
        model=model_identity(model_options.model, model_options.base_url),
    )
    return _Selfplay(plan, specs, model_options, config, gen, run_config, identity)


def _play_selfplay(s: _Selfplay, life: Any) -> tuple[dict[str, Any], int, list[str]]:
    """Inside the run's lifecycle: play what is missing, write the summary and the status;
    (the summary, failed episodes, a line per game without a score)."""
    import asyncio

    from core.model_options import open_endpoint
    from core.runstore import RunStatus
    from core.usage import add_usage
    from games.selfplay import selfplay_key, summarize_selfplay
    from harness.unscored import no_score_line

    run, seed = life.run, s.plan.sampling.seed
    done = life.resume(selfplay_key)
    wanted = {(spec.name, n) for spec in s.specs for n in range(seed, seed + s.plan.episodes)}
    todo = len(wanted - done)
    if done:
        print(f"resuming {run.path}: {counted(len(done), 'record')} kept, {todo} to run")
    started = time.perf_counter()
    with open_endpoint(s.model_options, run, s.gen) as endpoint_config:
        life.start(
            config=s.run_config,
            model=endpoint_config.model,
            endpoint=endpoint_config.public(),
            seeds={"first_episode_seed": seed},
        )
        usage = asyncio.run(_selfplay(s, run, done, todo, endpoint_config))
    summary = summarize_selfplay(s.specs, run.records())
    summary["model"] = endpoint_config.model
    summary["wall_s"] = round(time.perf_counter() - started, 3)
    # added up over the run's attempts, like eval's usage.json
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
    return summary, errors, unscored


async def _selfplay(
    s: _Selfplay, run: RunDir, done: set[Any], todo: int, endpoint_config: EndpointConfig
) -> dict[str, Any]:
    """Play the missing episodes; the model's usage."""
    from core.endpoint import Endpoint
    from games.players import PlayerContext, make_player
    from games.records import RecordWriter
    from games.selfplay import run_selfplay

    endpoint = Endpoint(endpoint_config)
    context = PlayerContext(spec=s.specs[0], endpoint=endpoint, gen=s.gen)
    model_player = make_player("self", context)
    try:
        with progress_ticker(todo, s.plan.quiet, "self-play episodes") as tick:
            await run_selfplay(
                s.specs, model_player, s.config, sink=RecordWriter(run), done=done, on_record=tick
            )
    finally:
        usage = await close_endpoint(endpoint)
    return usage


def _print_selfplay(summary: dict[str, Any]) -> None:
    from harness.unscored import NO_SCORE

    for name, stats in summary["games"].items():
        returns = ", ".join(f"{value:+.3f}" for value in stats["mean_return"])
        if not stats["episodes"]:
            returns = NO_SCORE
        print(
            f"{name}: {stats['episodes']} episodes, mean return per seat [{returns}], "
            f"invalid {stats['invalid_episode_rate']:.3f}, {stats['turns']} turns"
        )
