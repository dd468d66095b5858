"""`mars train`: self-play training on the embedded CPU trainer (`--trainer local`) or on verl.

Settings come from `train_backend.config.TrainConfig`: its defaults (the CPU-sized ones for the
local trainer), then the run's stored config when resuming, then `--config FILE.yaml`, then flags.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.errors import MarsError
from core.names import a_run_of, comma_list
from mars.commands import options
from mars.commands.app import app

if TYPE_CHECKING:
    from train_backend.config import TrainConfig


def _split_games(games: str | None) -> list[str] | None:
    if games is None:
        return None
    names = comma_list(games, "--games")
    if not names:
        raise MarsError("--games needs at least one game name")
    return names


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


@app.command("train")
def train_command(
    trainer: str = options.TRAINER,
    backend: str = options.TRAINER_AS_BACKEND,
    config_file: Path = typer.Option(None, "--config", help="A YAML file of TrainConfig fields."),
    model: str = typer.Option(
        None, "--model", help="Hugging Face causal-LM folder (default: the embedded tiny model)."
    ),
    games: str = typer.Option(
        None, "--games", help="Comma-separated, e.g. tic_tac_toe,kuhn_poker."
    ),
    preset: str = typer.Option(
        None,
        "--preset",
        help="marshal: every choice of the released MARSHAL code (docs/parity.md); none: the "
        "defaults. verl on GPUs uses marshal unless told otherwise.",
    ),
    estimator: str = typer.Option(
        None, "--estimator", help="marshal, no_turn_level, grpo, at_grpo, ..."
    ),
    opponent: str = typer.Option(
        None,
        "--opponent",
        help="Train against a fixed player instead of self-play: random, mcts:N, cfr:N, "
        "checkpoint:PATH, or pool (the policy's own past snapshots, fictitious self-play); the "
        "policy's seat alternates.",
    ),
    steps: int = typer.Option(None, "--steps", min=1, help="Training steps (updates) in all."),
    games_per_step: int = typer.Option(None, "--games-per-step", min=1, help="Games per step."),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate."),
    kl_coef: float = typer.Option(None, "--kl-coef", help="k3 KL weight (0: no reference)."),
    temperature: float = typer.Option(None, "--temperature", help="Sampling temperature."),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", help="New tokens per reply."),
    eval_every: int = typer.Option(None, "--eval-every", help="Evaluate every N steps (0: never)."),
    save_every: int = typer.Option(None, "--save-every", help="Checkpoint every N steps."),
    seed: int = typer.Option(None, "--seed", help="Run seed (episode seeds, sampling, order)."),
    threads: int = typer.Option(
        1, "--threads", min=1, help="torch CPU threads (local); 1 is fastest for the tiny model."
    ),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    resume: Path = typer.Option(
        None, "--resume", help="An existing training run directory to continue."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check and print the resolved config; train nothing."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No per-step lines."),
    ray_address: str = typer.Option(
        None, "--ray-address", help="verl: attach to this running Ray cluster (e.g. HEAD:6379)."
    ),
    device: str = typer.Option(
        None, "--device", help="verl: cuda (GPUs, default) | cpu (rehearse on this machine)."
    ),
) -> None:
    """Self-play training (MARSHAL): both seats share the policy; checkpoints in RUN/checkpoints."""
    trainer = options.trainer_choice(trainer, backend)
    run_path = _run_path(run_dir, resume)
    refuse_other_training(run_path, workflow=False)
    flags = {
        "preset": preset,
        "model": model,
        "games": _split_games(games),
        "estimator": estimator,
        "opponent": opponent,
        "steps": steps,
        "games_per_step": games_per_step,
        "learning_rate": lr,
        "kl_coef": kl_coef,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "eval_every": eval_every,
        "save_every": save_every,
        "seed": seed,
    }
    # The CPU-sized defaults serve the local trainer and verl on a CPU (--device cpu) alike.
    cpu_sized = trainer == "local" or device == "cpu"
    # verl on a cluster reproduces the paper unless told otherwise; the CPU sizes are for rehearsal.
    default_preset = None if cpu_sized else "marshal"
    config = resolve_config(
        config_file,
        flags,
        _stored_config(run_path),
        local=cpu_sized,
        default_preset=default_preset,
    )
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
    command = ["mars", *sys.argv[1:]]
    if trainer == "verl":
        _train_verl(config, out=out, run_path=run_path, dry_run=dry_run)
    else:
        _train_local(
            config,
            out=out,
            run_path=run_path,
            dry_run=dry_run,
            command=command,
            threads=threads,
            quiet=quiet,
        )


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
) -> None:
    import torch

    from core.lifecycle import run_lifecycle
    from train_backend.local.checkpoint import latest_checkpoint
    from train_backend.local.evaluate import eval_pairs
    from train_backend.local.policy import load_policy, resolve_model_path
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
        return
    log = (lambda _line: None) if quiet else print
    identity = training_identity(config.model_dump(mode="json"))
    with run_lifecycle(
        out=out, run_dir=run_path, kind="train", slug=_slug(config), identity=identity
    ) as life:
        train_local(config, life.run, command=command, log=log, policy=policy)
    print(f"run dir: {life.path}")


def _check_verl_opponent(config: TrainConfig) -> None:
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


def _train_verl(config: TrainConfig, *, out: Path, run_path: Path | None, dry_run: bool) -> None:
    from train_backend.local.trainer import check_games_and_estimator

    check_games_and_estimator(config)
    if config.opponent:
        _check_verl_opponent(config)
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
    launch_verl_run(
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
    config: TrainConfig,
    *,
    out: Path,
    run_path: Path | None,
    slug: str,
    dry_run: bool,
    preflight: Any,
    launch: Any,
) -> None:
    """The preflight (before any run directory is made), then `launch(config, run, dry_run=)`
    inside the run directory's lifecycle."""
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
