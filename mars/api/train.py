"""`mars.train`: self-play training on the embedded CPU trainer (`trainer="local"`) or on verl.

`mars train` parses its options into a `TrainPlan` and calls `train`; a notebook calls it directly.
Settings come from `train_backend.config.TrainConfig`: its defaults (the CPU-sized ones for the
local trainer), then the run's stored config when resuming, then the config file, then the plan's
settings. Everything is checked before a run directory is made.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from core.lifecycle import invocation
from core.names import a_run_of
from mars.api.plans import build_plan, loggers, names
from mars.api.results import RunResult, read_train

if TYPE_CHECKING:
    from train_backend.config import TrainConfig

TRAINERS = ("local", "verl")


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """What `mars train` runs. A setting left None comes from the layers under it (the
    trainer's defaults, the preset, a resumed run's stored config, `config_file`); `settings`
    are further TrainConfig fields by name, as a config file writes them, under the named ones.
    `max_tokens` is TrainConfig's `max_new_tokens` (new tokens per reply)."""

    trainer: str | None = None  # local (default) | verl
    config_file: Path | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    model: str | None = None
    games: str | Sequence[str] | None = None
    preset: str | None = None
    estimator: str | None = None
    opponent: str | None = None
    steps: int | None = None
    games_per_step: int | None = None
    learning_rate: float | None = None
    kl_coef: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    eval_every: int | None = None
    save_every: int | None = None
    seed: int | None = None
    threads: int = 1
    out: Path = Path("runs")
    run_dir: Path | None = None
    resume: Path | None = None
    dry_run: bool = False
    quiet: bool = False
    logger: str | Sequence[str] | None = None  # trackers; None: the config's
    ray_address: str | None = None
    device: str | None = None


def train(plan: TrainPlan | None = None, /, **kwargs: Any) -> RunResult:
    """Train as `plan` (or the plan the keyword arguments build) says and return the run: its
    figures are the last metrics row and the last in-training evaluation
    (`mars.api.results.train_figures`). A rerun into the same run directory resumes. A dry run
    trains nothing: its summary holds the resolved `config` and `dry_run: True`."""
    plan = build_plan(TrainPlan, plan, kwargs)
    trainer = trainer_name(plan.trainer)
    run_path = _run_path(plan.run_dir, plan.resume)
    refuse_other_training(run_path, workflow=False)
    config = _config(plan, trainer, run_path)
    if trainer == "verl":
        path = _train_verl(config, out=plan.out, run_path=run_path, dry_run=plan.dry_run)
    else:
        path = _train_local(
            config,
            out=plan.out,
            run_path=run_path,
            dry_run=plan.dry_run,
            command=invocation(),
            threads=plan.threads,
            quiet=plan.quiet,
        )
    if path is None or plan.dry_run:  # the local trainer's dry run makes no run directory
        return dry_run_result(path or run_path or plan.out, config)
    return read_train(path)


def trainer_name(trainer: str | None) -> str:
    """`trainer` checked (None: local)."""
    chosen = trainer or "local"
    if chosen not in TRAINERS:
        raise MarsError(f"--trainer must be one of {', '.join(TRAINERS)}, not {chosen!r}")
    return chosen


def dry_run_result(run_dir: Path, config: Any) -> RunResult:
    """What a dry run returns: nothing trained, the config it would have trained with."""
    summary = {"dry_run": True, "config": config.model_dump(mode="json")}
    return RunResult(kind="train", run_dir=Path(run_dir), summary=summary, figures={})


def _config(plan: TrainPlan, trainer: str, run_path: Path | None) -> TrainConfig:
    """The resolved config, with the verl-only flags checked and applied."""
    named = {
        "preset": plan.preset,
        "model": plan.model,
        "games": _split_games(plan.games),
        "estimator": plan.estimator,
        "opponent": plan.opponent,
        "steps": plan.steps,
        "games_per_step": plan.games_per_step,
        "learning_rate": plan.learning_rate,
        "kl_coef": plan.kl_coef,
        "temperature": plan.temperature,
        "top_p": plan.top_p,
        "max_new_tokens": plan.max_tokens,
        "eval_every": plan.eval_every,
        "save_every": plan.save_every,
        "seed": plan.seed,
        "logger": loggers(plan.logger),
    }
    flags = {**plan.settings, **{key: value for key, value in named.items() if value is not None}}
    # The CPU-sized defaults serve the local trainer and verl on a CPU (--device cpu) alike.
    cpu_sized = trainer == "local" or plan.device == "cpu"
    # verl on a cluster reproduces the paper unless told otherwise; the CPU sizes are for rehearsal.
    config = resolve_config(
        plan.config_file,
        flags,
        _stored_config(run_path),
        local=cpu_sized,
        default_preset=None if cpu_sized else "marshal",
    )
    return _verl_flags(config, trainer, ray_address=plan.ray_address, device=plan.device)


def _verl_flags(
    config: TrainConfig, trainer: str, *, ray_address: str | None, device: str | None
) -> TrainConfig:
    if ray_address is not None:
        if trainer != "verl":
            raise MarsError("--ray-address is for --trainer verl")
        config = config.model_copy(
            update={"verl": config.verl.model_copy(update={"ray_address": ray_address})}
        )
    if device is not None:
        if trainer != "verl":
            raise MarsError("--device is for --trainer verl (the local trainer runs on the CPU)")
        if device not in ("cuda", "cpu"):
            raise MarsError(f"--device must be cuda or cpu, not {device!r}")
        verl = config.verl.model_dump(exclude_unset=True) | {"device": device}
        config = config.model_copy(update={"verl": type(config.verl).model_validate(verl)})
    return config


def _split_games(games: str | Sequence[str] | None) -> list[str] | None:
    if games is None:
        return None
    found = list(names(games, "--games"))
    if not found:
        raise MarsError("--games needs at least one game name")
    return found


def _stored_config(run_path: Path | None) -> dict[str, Any]:
    """The config a training run directory was started with ({} for a new directory)."""
    if run_path is None or not (run_path / "run.json").is_file():
        return {}
    from core.runstore import RunDir

    info = RunDir.read_info(run_path)
    if info.kind != "train":
        raise MarsError(f"{run_path} holds {a_run_of(info.kind)}; it cannot resume as 'train'")
    return dict(info.config)


def _file_keys(config_file: Path | None) -> set[str]:
    if config_file is None:
        return set()
    import yaml

    try:
        loaded = yaml.safe_load(Path(config_file).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return set()  # load_train_config reports it
    return set(loaded) if isinstance(loaded, dict) else set()


def resolve_config(
    config_file: Path | None,
    flags: dict[str, Any],
    stored: dict[str, Any],
    *,
    local: bool,
    default_preset: str | None = None,
) -> TrainConfig:
    """Defaults < the preset < the resumed run's stored config < the YAML file < the flags given."""
    from train_backend.config import load_train_config

    file_keys = _file_keys(config_file)
    base = {key: value for key, value in stored.items() if key not in file_keys}
    given = {key: value for key, value in flags.items() if value is not None}
    return load_train_config(
        config_file, {**base, **given}, local=local, default_preset=default_preset
    )


def _run_path(run_dir: Path | None, resume: Path | None) -> Path | None:
    if resume is not None:
        if run_dir is not None and Path(run_dir).resolve() != Path(resume).resolve():
            raise MarsError("--resume and --run-dir name different directories; give one")
        if not (Path(resume) / "run.json").is_file():
            raise MarsError(f"--resume {resume}: no training run there (no run.json)")
        return Path(resume)
    return Path(run_dir) if run_dir is not None else None


def _slug(config: TrainConfig) -> str:
    return f"{'-'.join(config.games)}-{config.estimator}"


def _train_local(
    config: TrainConfig,
    *,
    out: Path,
    run_path: Path | None,
    dry_run: bool,
    command: list[str],
    threads: int,
    quiet: bool,
) -> Path | None:
    """Train on the embedded CPU trainer; the run directory (None after a dry run)."""
    import torch

    from core.causal_lm import load_policy, resolve_model_path
    from core.lifecycle import run_lifecycle
    from train_backend.local.checkpoint import latest_checkpoint
    from train_backend.local.evaluate import eval_pairs
    from train_backend.local.runlog import training_identity
    from train_backend.local.trainer import check_config, train_local

    torch.set_num_threads(threads)
    specs = check_config(config)
    if config.eval_every:
        eval_pairs(specs, config.eval_opponents)  # bad opponent names fail before any file
    resuming = run_path is not None and latest_checkpoint(run_path) is not None
    # Load (and so check) the model before any directory is made; a resumed run loads its
    # checkpoint instead.
    policy = None if resuming else load_policy(resolve_model_path(config.model))
    if dry_run:
        print(json.dumps(config.model_dump(mode="json"), indent=2))
        where = f"resume {latest_checkpoint(run_path)[1]}" if resuming else "start at step 0"
        print(f"dry run: {config.steps} steps of {config.games_per_step} games; {where}")
        return None
    log = (lambda _line: None) if quiet else print
    identity = training_identity(config.model_dump(mode="json"))
    with run_lifecycle(
        out=out, run_dir=run_path, kind="train", slug=_slug(config), identity=identity
    ) as life:
        train_local(config, life.run, command=command, log=log, policy=policy)
    print(f"run dir: {life.path}")
    return life.path


def check_verl_opponent(config: TrainConfig) -> None:
    """verl's agent loop plays a bot opponent itself; a model opponent would need a server."""
    from games.spec import get_game
    from train_backend.local.opponents import make_fixed_opponent

    opponent = make_fixed_opponent(config.opponent or "", [get_game(g) for g in config.games])
    if opponent.bots:
        return
    raise MarsError(
        f"--opponent {config.opponent} on verl: its agent loop plays bots only (random, mcts:N, "
        "cfr:N, ...); a model opponent (checkpoint:PATH, pool) runs on --trainer local"
    )


def check_verl_config(config: TrainConfig) -> None:
    """What verl trains, checked as `mars train --trainer verl` does before anything runs
    (verl itself need not be installed)."""
    from train_backend.local.trainer import check_games_and_estimator

    check_games_and_estimator(config)
    if config.opponent:
        check_verl_opponent(config)


def _train_verl(config: TrainConfig, *, out: Path, run_path: Path | None, dry_run: bool) -> Path:
    check_verl_config(config)
    if config.tree.explore > 0:
        raise MarsError("tree.explore (own-move exploration) runs on --trainer local only for now")
    if config.tree.branch_rate < 1:
        raise MarsError("tree.branch_rate < 1 runs on --trainer local only for now")
    if config.tree.keep_invalid:
        raise MarsError("tree.keep_invalid runs on --trainer local only for now")
    try:
        from train_backend.verl.launch import preflight, run_verl
    except ModuleNotFoundError as exc:
        raise MarsError("verl backend not installed: make setup-verl") from exc
    return launch_verl_run(
        config, out=out, run_path=run_path, slug=_slug(config), dry_run=dry_run,
        preflight=preflight, launch=run_verl,
    )  # fmt: skip


def refuse_other_training(run_path: Path | None, *, workflow: bool) -> None:
    """A training run directory resumes only under the command that made it: one line saying
    which, instead of a diff of every setting the two kinds do not share."""
    from core.runstore import RUN_FILE, RunDir

    if run_path is not None and Path(run_path).exists() and not Path(run_path).is_dir():
        raise MarsError(f"--run-dir {run_path} exists and is not a directory")
    if run_path is None or not (Path(run_path) / RUN_FILE).is_file():
        return
    info = RunDir.read_info(Path(run_path))
    made_by_train_mas = "workflow" in info.config
    if info.kind != "train" or made_by_train_mas == workflow:
        return  # another kind of run: RunDir.resolve names it
    made = (
        "a MAS-training run (mars train-mas)"
        if made_by_train_mas
        else ("a game-training run (mars train)")
    )
    command = "mars train-mas" if workflow else "mars train"
    raise MarsError(f"{run_path} is {made}; {command} needs a new --run-dir")


def launch_verl_run(
    config: Any,
    *,
    out: Path,
    run_path: Path | None,
    slug: str,
    dry_run: bool,
    preflight: Callable[..., Any],
    launch: Callable[..., Any],
) -> Path:
    """The preflight (before any run directory is made), then `launch(config, run, dry_run=)`
    inside the run directory's lifecycle; the run directory."""
    from core.lifecycle import run_lifecycle
    from core.runstore import RunStatus
    from train_backend.local.runlog import training_identity

    preflight(config, dry_run=dry_run)
    settings = config.model_dump(mode="json")
    identity = training_identity(settings)
    with run_lifecycle(
        out=out, run_dir=run_path, kind="train", slug=slug, identity=identity
    ) as life:
        life.start(config=settings, model=config.model, seeds={"seed": config.seed})
        launch(config, life.run, dry_run=dry_run)
        # A dry run trained nothing: a loop watching the directory must not read it as finished.
        life.finish(RunStatus.DRY_RUN if dry_run else RunStatus.COMPLETED)
    print(f"run dir: {life.path}")
    return life.path
