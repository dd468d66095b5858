"""A start model's play before any RL: per evaluated game and obfuscated variant, the share of
invalid replies and the entropy of the moves it names (bits).

The start is `--model FOLDER`, or `--start NAME`, a start of an experiment file (`--experiment`,
default marshal-mini, with its `--set` variables), built first when it is not (minutes: its
format pre-training). The games are `--games`, else every game the experiment evaluates from
that start: the arena and exploitability items of its loop parts whose baseline is the start
or whose watched training run starts from it (marshal-mini: `poker` gives Kuhn, its variant
and Leduc; `board` Tic-Tac-Toe, its variant and Connect Four).

Each game: `--positions` positions of random-vs-random games no recipe trains on, in the
start's prompt style (`--prompt-style`: compact, or numbered when its recipe says so),
`--samples` replies each at `--temperature` (self-play's, 1) and one greedy reply (the loop's
arena default); read as the arena reads them (train_backend/pretrain/play_quality.py).
Ends with one JSON line: `worst_invalid_share`, the highest invalid share over the games,
sampled or greedy, against the mini's target of 0.10, with each game's figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DryRun, add_dry_run, game_specs, report, run_dry

from core.errors import MarsError

TARGET = 0.10
DEFAULT_EXPERIMENT = "marshal-mini"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", type=Path, help="a start model's folder")
    which.add_argument("--start", help="a start of the experiment's `starts:` (default: poker)")
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="name or YAML file")
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="KEY=VALUE: a variable of it"
    )
    parser.add_argument("--games", help="comma-separated games (default: those it evaluates)")
    parser.add_argument("--positions", type=int, default=48, help="positions per game")
    parser.add_argument("--samples", type=int, default=8, help="sampled replies per position")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per reply")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prompt-style", choices=("compact", "numbered"), help="default: the start recipe's"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_dry_run(parser)
    args = parser.parse_args(argv)
    for name in ("positions", "samples", "max_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.temperature <= 0:
        parser.error("--temperature must be above 0 (the greedy reply is measured besides)")
    if args.model is None and args.start is None:
        args.start = "poker"
    return args


def evaluated_games(experiment: Any, start: str) -> list[str]:
    """The games the experiment's loop parts evaluate from `start` (arena and exploitability
    items), in the order first named."""
    import tempfile

    from mars.orchestration.experiments.parts import resolver
    from mars.orchestration.experiments.spec import substitute
    from mars.orchestration.loop.spec import parse_item

    resolve = resolver(experiment, Path(tempfile.gettempdir()), build=False)  # its variables
    reference = f"${{model:{start}}}"
    trained_from = {
        part.name for part in experiment.parts if (part.config or {}).get("model") == reference
    }
    games: list[str] = []
    for part in experiment.parts:
        if part.run != "loop":
            continue
        watched = str(part.args.get("watch", "")).removeprefix("${part:").removesuffix("}")
        if part.args.get("baseline") != reference and watched not in trained_from:
            continue
        for entry in substitute(part.evals or [], resolve):
            item = parse_item(entry) if isinstance(entry, str) else entry
            if item.get("kind") in ("arena", "exploit") and item["game"] not in games:
                games.append(item["game"])
    return games


def chosen(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The start (a folder, or the experiment's start) and the games to measure it on."""
    from mars.orchestration.experiments import load_experiment, parse_sets

    games = [g.strip() for g in args.games.split(",") if g.strip()] if args.games else []
    if args.model is not None:
        if not games:
            raise MarsError("--model needs --games (a folder says nothing of what it is for)")
        return args.model, games
    experiment = load_experiment(args.experiment, parse_sets(args.sets))
    if args.start not in experiment.starts:
        known = ", ".join(experiment.starts) or "none"
        raise MarsError(f"{experiment.name} declares no start {args.start!r}; its starts: {known}")
    games = games or evaluated_games(experiment, args.start)
    if not games:
        raise MarsError(f"{experiment.name} evaluates no game from its start {args.start}")
    return experiment, games


def recipe_style(source: Any, args: argparse.Namespace) -> str:
    """The prompt style the start was taught: its experiment recipe's, or a folder's
    `pretrain.json` recipe (compact when it says nothing)."""
    if args.model is not None:
        import json

        try:
            recipe = json.loads((Path(source) / "pretrain.json").read_text())["recipe"]
        except (OSError, ValueError, KeyError, TypeError):
            return "compact"
        return str(recipe.get("prompt_style", "compact"))
    return str(source.start_recipe(args.start).get("prompt_style", "compact"))


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The start's recipe and the games: the experiment's own validation, the game registry."""
    from mars.orchestration.experiments.parts import start_state

    source, games = chosen(args)
    if args.model is not None:
        if not (Path(source) / "config.json").is_file():
            raise MarsError(f"--model {source}: no model folder there")
    else:
        folder, built = start_state(source, args.start)
        if not built:
            dry.note(f"the start {folder.name} is built first (minutes)")
        dry.count("start")
    game_specs(dry, games)


def main() -> None:
    args = parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    from core.reply_tuning import torch_threads
    from mars.orchestration.experiments.parts import build_start
    from train_backend.pretrain.play_quality import measure_start

    try:
        source, games = chosen(args)
        folder = Path(source) if args.model is not None else build_start(source, args.start)
        style = args.prompt_style or recipe_style(source, args)
    except MarsError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"start: {folder}")

    def show(result: Any) -> None:
        print(
            f"  {result.game}: invalid {result.invalid_share:.3f} sampled, "
            f"{result.greedy_invalid_share:.3f} greedy; entropy {result.entropy_bits:.2f} bits "
            f"of {result.uniform_bits:.2f} (uniform), {result.positions} positions"
        )

    with torch_threads(args.threads):
        results = measure_start(
            folder,
            games,
            positions=args.positions,
            samples=args.samples,
            temperature=args.temperature,
            max_new_tokens=args.max_tokens,
            seed=args.seed,
            style=style,
            on_game=show,
        )
    worst = max(max(r.invalid_share, r.greedy_invalid_share) for r in results)
    report(
        "worst_invalid_share",
        worst,
        TARGET,
        games={r.game: r.as_dict() for r in results},
        start=str(folder),
        temperature=args.temperature,
        samples=args.samples,
        prompt_style=style,
    )


if __name__ == "__main__":
    main()
