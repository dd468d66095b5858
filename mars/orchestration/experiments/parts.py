"""Each part of an experiment as the `mars` command line that runs it, and how far it got."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from core.errors import MarsError
from core.names import unknown_name
from mars.orchestration.experiments.spec import (
    COMMANDS,
    MODELS,
    Experiment,
    Part,
    start_settings,
    substitute,
)

if TYPE_CHECKING:
    from train_backend.pretrain.starts import Start

CONFIGS = "configs"  # EXP/configs/: the --config and --eval files the parts read
LOGS = "logs"  # EXP/logs/NAME.log: each part's output
FAILURES_SUMMARY = "failures_summary.json"  # harness.failures' summary in the analysed run
# The parts whose command takes `--logger`: the experiment's `logger` goes to them.
LOGGED = ("train", "train-mas", "loop")


def model_path(key: str, *, build: bool) -> Path:
    """A built-in starting model: built on first use when `build`, else where it will be."""
    from train_backend.pretrain.starts import built_in

    if key not in MODELS:
        raise MarsError(unknown_name("model", key, MODELS))
    if key == "tiny":
        from core.tiny_model import default_tiny_model_dir, ensure_tiny_model

        return ensure_tiny_model() if build else default_tiny_model_dir()
    start = built_in(key)
    return start.build() if build else start.folder


def experiment_start(experiment: Experiment, name: str) -> Start:
    """A start the experiment declares (`starts:`): the embedded tiny model format-pre-trained
    on its recipe, cached as `...-format-EXPERIMENT-NAME` (a changed recipe rebuilds it), or in
    a built-in start's folder when it is that start's recipe."""
    from train_backend.pretrain.starts import declared

    kind, settings = start_settings(name, experiment.start_recipe(name))
    return declared(kind, settings, f"{experiment.name}-{name}")


def start_path(experiment: Experiment, name: str, *, build: bool) -> Path:
    start = experiment_start(experiment, name)
    return start.build() if build else start.folder


def resolver(experiment: Experiment, root: Path, *, build: bool) -> Callable[[str], Any]:
    """What `${ref}` means in this experiment folder (`build`: build starting models now)."""
    built: dict[str, Path] = {}

    def resolve(ref: str) -> Any:
        kind, _, name = ref.partition(":")
        if ref == "exp":
            return str(root)
        if kind == "part" and name:
            return str(root / experiment.part(name).name)
        if kind == "model" and name:
            if name not in built:
                if name in experiment.starts:
                    built[name] = start_path(experiment, name, build=build)
                elif name in MODELS:
                    built[name] = model_path(name, build=build)
                else:
                    raise MarsError(unknown_name("model", name, [*MODELS, *experiment.starts]))
            return str(built[name])
        if ref in experiment.vars:
            return experiment.vars[ref]
        raise MarsError(unknown_name("experiment variable", ref, experiment.vars))

    return resolve


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _argv_of(args: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, value in args.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(_flag(key))
        elif isinstance(value, list | tuple):
            argv += [_flag(key), ",".join(str(v) for v in value)]
        elif isinstance(value, dict):  # e.g. mas_option: {rounds: 2} -> --mas-option rounds=2
            for sub, subvalue in value.items():
                argv += [_flag(key), f"{sub}={json.dumps(subvalue)}"]
        else:
            argv += [_flag(key), str(value)]
    return argv


@dataclass(frozen=True)
class Resolved:
    """A part with every reference resolved: its command line and the files it reads."""

    part: Part
    run_dir: Path
    argv: list[str]  # after `mars`
    files: dict[Path, Any]  # written (as YAML) before the command runs
    args: dict[str, Any]
    config: dict[str, Any] | None
    evals: list[Any] | None

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "mars", *self.argv]

    def write_files(self) -> None:
        for path, data in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(data, sort_keys=False))


def resolve_part(part: Part, experiment: Experiment, root: Path, resolve: Callable) -> Resolved:
    args = substitute(part.args, resolve)
    config = substitute(part.config, resolve) if part.config is not None else None
    evals = substitute(part.evals, resolve) if part.evals is not None else None
    run_dir = root / part.name
    files: dict[Path, Any] = {}
    argv = [part.run]
    if part.run == "failures":
        argv.append(str(substitute(part.target, resolve)))
    if config is not None:
        path = root / CONFIGS / f"{part.name}.yaml"
        files[path] = config
        argv += ["--config", str(path)]
    if evals is not None:
        path = root / CONFIGS / f"{part.name}-evals.yaml"
        files[path] = evals
        argv += ["--eval", str(path)]
    argv += _argv_of(args)
    if experiment.logger and part.run in LOGGED and "logger" not in args:
        argv += ["--logger", ",".join(experiment.logger)]
    if COMMANDS[part.run]:
        argv += ["--run-dir", str(run_dir)]
    return Resolved(part, run_dir, argv, files, args, config, evals)


def resolve_parts(
    experiment: Experiment, root: Path, *, build: bool, only: Sequence[str] = ()
) -> list[Resolved]:
    """Every part, or those named in `only`: with `build`, the starts they use are built first
    (and only those: `--only train-kuhn` does not build the board start)."""
    resolve = resolver(experiment, root, build=build)
    return [
        resolve_part(part, experiment, root, resolve)
        for part in experiment.parts
        if not only or part.name in only
    ]


def starts_used(experiment: Experiment, root: Path, only: Sequence[str] = ()) -> list[str]:
    """The starting models (`${model:KEY}`) the parts (or those in `only`) use, each once, in
    the order first named (through variables too); nothing is built."""
    used: list[str] = []
    plain = resolver(experiment, root, build=False)

    def resolve(ref: str) -> Any:
        kind, _, name = ref.partition(":")
        if kind == "model" and name and name not in used:
            used.append(name)
        return plain(ref)

    for part in experiment.parts:
        if not only or part.name in only:
            resolve_part(part, experiment, root, resolve)
    return used


def _build_declared(experiment: Experiment, key: str) -> str:
    return str(start_path(experiment, key, build=True))


def build_starts_side_by_side(
    experiment: Experiment, root: Path, only: Sequence[str] = ()
) -> list[str]:
    """Build the declared starts the parts use that are not built yet, each in a process of its
    own, as many at once as there are cores; the keys built. A build trains on one torch thread
    (its recipe's `threads`), so on two cores two starts take about as long as the longer one
    (marshal-mini's poker and board starts: experiments.md). One start, or one core: nothing
    here, the parts' resolution builds it as before."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    keys = [key for key in starts_used(experiment, root, only) if key in experiment.starts]
    todo = [key for key in keys if not experiment_start(experiment, key).is_built()]
    cores = os.cpu_count() or 1
    if len(todo) < 2 or cores < 2:
        return []
    from core.tiny_model import ensure_tiny_model

    ensure_tiny_model()  # the base they share, built once before they start
    with ProcessPoolExecutor(min(len(todo), cores), mp_context=get_context("spawn")) as pool:
        futures = {key: pool.submit(_build_declared, experiment, key) for key in todo}
        for key, future in futures.items():
            try:
                future.result()  # a build's MarsError is raised here
            except BrokenProcessPool:
                raise MarsError(
                    f"the build of start {key} died (out of memory, or killed); "
                    f"`mars experiment {experiment.name} --starts` builds the starts again"
                ) from None
    return todo


def build_start(experiment: Experiment, key: str) -> Path:
    """A starting model the experiment names (declared or built-in), built unless it is."""
    if key in experiment.starts:
        return start_path(experiment, key, build=True)
    return model_path(key, build=True)


def start_state(experiment: Experiment, key: str) -> tuple[Path, bool]:
    """Where a starting model the experiment names lies, and whether it is built there."""
    if key in experiment.starts:
        start = experiment_start(experiment, key)
    elif key == "tiny":
        from core.tiny_model import default_tiny_model_dir

        folder = default_tiny_model_dir()
        return folder, (folder / "config.json").is_file()
    else:
        from train_backend.pretrain.starts import built_in

        start = built_in(key)
    return start.folder, start.is_built()


class PartState(str, Enum):
    DONE = "done"  # finished: skipped on a rerun
    UNFINISHED = "unfinished"  # started, not finished: the command's own resume continues it
    NEW = "new"


def part_state(resolved: Resolved) -> PartState:
    """Finished is the command's own word for it: run.json `completed` (a loop or eval run
    that finished with errors is rerun, which redoes only what errored), or for a failures
    part its summary in the analysed run."""
    if resolved.part.run == "failures":
        target = Path(resolved.argv[1])
        return PartState.DONE if (target / FAILURES_SUMMARY).is_file() else PartState.NEW
    run_file = resolved.run_dir / "run.json"
    if not run_file.is_file():
        return PartState.NEW
    try:
        status = json.loads(run_file.read_text()).get("status")
    except (OSError, json.JSONDecodeError):
        return PartState.UNFINISHED
    return PartState.DONE if status == "completed" else PartState.UNFINISHED
