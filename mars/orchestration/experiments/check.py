"""`mars experiment --dry-run`: every part checked as its command would check it, nothing run.

The command line goes through the real parsers (`mars.command_check`), each training config
through the training commands' own validators (`mars.api.train`, `mars.api.train_mas`), and the
names a part uses (games, players, suites, MAS, loop items) by the registries that own them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from core.names import unknown_name
from mars.orchestration.experiments.parts import Resolved, resolve_parts
from mars.orchestration.experiments.spec import Experiment

if TYPE_CHECKING:
    from mars.orchestration.loop.spec import LoopSpec


def check_experiment(experiment: Experiment, root: Path) -> list[str]:
    """One line per part saying what it would run; MarsError naming the part on a problem."""
    from mars.command_check import check_command_line

    lines = []
    resolved = resolve_parts(experiment, root, build=False)
    for item in resolved:
        try:
            check_command_line(item.argv)
            detail = check_names(item)
            if item.config is not None:
                detail = check_train(item)
        except MarsError as exc:
            raise MarsError(f"part {item.part.name}: {exc}") from exc
        lines.append(
            f"{item.part.name}: mars {' '.join(item.argv)}" + (f"  ({detail})" * bool(detail))
        )
    check_answers(experiment, resolved)
    return lines


def check_answers(experiment: Experiment, resolved: list[Resolved]) -> None:
    """Each question's answer names evaluations its loop parts run (by the items' keys), of one
    kind, and a seat or figure only for an arena."""
    kinds = {
        item.part.name: {entry.key: entry.kind for entry in loop_spec(item.evals or []).evals}
        for item in resolved
        if item.part.run == "loop"
    }
    for number, question in enumerate(experiment.report.questions):
        where = f"report.questions[{number}]"
        for answer in question.answers:
            against = (answer.against.part or answer.part, answer.against.eval or answer.eval)
            for part, key in ((answer.part, answer.eval), against):
                if key not in kinds[part]:
                    name = unknown_name(f"evaluation of part {part}", key, kinds[part])
                    raise MarsError(f"{where}: {name}")
            kind, other = kinds[answer.part][answer.eval], kinds[against[0]][against[1]]
            if kind != other:
                raise MarsError(
                    f"{where}: {answer.eval} ({kind}) cannot be compared with {against[1]} "
                    f"({other})"
                )
            if kind != "arena" and (answer.seat or answer.figure):
                raise MarsError(f"{where}: `seat` and `figure` are for arena evaluations")


def check_train(item: Resolved) -> str:
    """The part's training config through the validators its command uses before it runs; a
    one-line description."""
    args, config = item.args, dict(item.config or {})
    trainer = str(args.get("trainer", "local"))
    cpu_sized = trainer == "local" or args.get("device") == "cpu"
    if item.part.run == "train-mas":
        return _check_train_mas(args, config, cpu_sized=cpu_sized)
    import yaml

    from mars.api.train import check_verl_config, resolve_config
    from train_backend.local.trainer import check_config

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        flags = {"preset": args.get("preset"), "opponent": args.get("opponent")}
        resolved = resolve_config(
            path, flags, {}, local=cpu_sized, default_preset=None if cpu_sized else "marshal"
        )
    if trainer == "local":
        check_config(resolved)
    else:
        check_verl_config(resolved)
    against = f" vs {resolved.opponent}" if resolved.opponent else " self-play"
    return (
        f"{trainer}: {','.join(resolved.games)}{against}, {resolved.estimator}, "
        f"{resolved.steps} steps of {resolved.games_per_step} games"
    )


def _check_train_mas(args: dict[str, Any], config: dict[str, Any], *, cpu_sized: bool) -> str:
    from mars.api.train_mas import checked_config
    from train_backend.presets import preset_settings

    if args.get("preset"):
        config["preset"] = args["preset"]
    checked = checked_config(
        {**preset_settings(config.get("preset"), workflow=True), **config}, cpu_sized=cpu_sized
    )
    roles = f", policies {checked.policies}" if checked.policies else ""
    return f"{checked.workflow} on {checked.train_set}, {checked.steps} steps{roles}"


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if str(v).strip()]
    return [v.strip() for v in str(value).split(",") if v.strip()]


def check_names(item: Resolved) -> str:
    """The games, players, suites and MAS the part names, by their registries; a short note."""
    from games.infostates import check_exact_best_response
    from games.spec import get_game
    from harness.benchmarks import get_suite
    from mas.base import get_mas

    args, run = item.args, item.part.run
    if run in ("arena", "exploitability"):
        spec = get_game(str(args.get("game", "")))
        for key in ("player", "opponent"):
            if args.get(key):
                check_player(str(args[key]), spec)
        if run == "exploitability":
            check_exact_best_response(spec)
        return ""
    if run == "selfplay":
        for name in _names(args.get("games")):
            get_game(name)
        return ""
    if run == "eval":
        for suite in _names(args.get("suite")):
            get_suite(suite)
        if args.get("mas"):
            get_mas(str(args["mas"]))
        return ""
    if run == "loop":
        return check_loop_items(item.evals or [])
    if run == "failures":
        target = Path(item.argv[1])
        if item.run_dir.parent not in target.parents:
            raise MarsError(f"target {target} is not a run inside the experiment")
    return ""


def check_player(name: str, spec: Any) -> None:
    from games.players import PlayerContext, known_players, make_player, needs_model

    if needs_model(name):
        if name.split(":")[0].strip().lower() not in known_players():
            raise MarsError(f"unknown player {name!r}")
        return
    make_player(name, PlayerContext(spec=spec))


def loop_spec(evals: list[Any]) -> LoopSpec:
    """A loop part's `evals` as `mars loop` reads them (`LoopSpec`); one line if bad."""
    from pydantic import ValidationError

    from mars.orchestration.loop.spec import LoopSpec, parse_item

    items = [parse_item(e) if isinstance(e, str) else e for e in evals]
    try:
        return LoopSpec.model_validate({"evals": items})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise MarsError(f"bad evals at {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def check_loop_items(evals: list[Any]) -> str:
    """The loop's items as `mars loop` checks them before serving anything."""
    from mars.orchestration.loop import SuiteItem, check_spec
    from mas.base import get_mas

    if not evals:
        raise MarsError("a loop part needs `evals`")
    spec = loop_spec(evals)
    check_spec(spec)
    for entry in spec.evals:
        if isinstance(entry, SuiteItem):
            get_mas(entry.mas)
    return f"{len(spec.evals)} evaluations a checkpoint"
