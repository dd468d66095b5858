"""`mars train --trainer verl`: prepare the run, check it against verl's config, launch, publish.

    RUN/verl/data/games.parquet   the games to play (data.py)
    RUN/verl/command.sh           the exact command, runnable by hand
    RUN/verl/checkpoints/         verl's own checkpoints (resume state)
    RUN/verl/metrics.jsonl        verl's metrics, one JSON line per step (its "file" logger);
                                  a resumed run first moves the earlier file to metrics.attemptK
    RUN/logs/verl.log             everything verl prints
    RUN/logs/merge-step_N.log     each checkpoint merge
    RUN/checkpoints/step_N/       Hugging Face model (a LoRA run: the adapter) + checkpoint.json

With `dry_run` everything is prepared and checked and the command is printed; nothing runs.
The caller (the CLI) starts the run in run.json and finishes it when `run_verl` returns or is
interrupted. A `MarsError` raised inside (a failed check, verl exiting non-zero, checkpoints not
published) marks the run `failed` before it propagates, so `mars loop` watching the run stops
waiting for more checkpoints.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from core.errors import MarsError
from core.processes import log_tail, stop_process_group
from core.runstore import RunDir, RunStatus
from train_backend.config import TrainConfig
from train_backend.mas.trained import policy_root
from train_backend.verl.adapter_export import adapter_target
from train_backend.verl.checkpoints import CheckpointPublisher, PolicyPublishers, model_dtype
from train_backend.verl.data import write_dataset
from train_backend.verl.overrides import RunPaths, verl_overrides, worker_environment
from train_backend.verl.policy_spec import actor_folder, job_spec
from train_backend.verl.preflight import config_rows, run_dir_rows
from train_backend.verl.preflight_rows import Machine, Report

POLL_SECONDS = 2.0  # a look at one small file: publish each checkpoint soon after it lands
STOP_GRACE_SECONDS = 30.0
SESSION_GRACE_SECONDS = 5.0
CPU_RAY_ENVIRONMENT = {
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    # every line of every worker in verl.log: Ray folds lines that differ only in numbers
    # (one rollout's "step 1" and "step 2") into one "[repeated Nx]"
    "RAY_DEDUP_LOGS": "0",
}


def require_verl() -> None:
    if importlib.util.find_spec("verl") is None:
        raise MarsError(
            "verl is not installed: run `make setup-verl` (it installs this project's `verl` "
            "extra, then verl 0.9.1 with --no-deps so torch stays; see docs/verl.md)"
        )


def local_gpu_count() -> int:
    """CUDA (or ROCm) devices torch sees on this machine."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require_gpus(config: TrainConfig, gpu_count: Callable[[], int] = local_gpu_count) -> None:
    """A real launch without a Ray address trains on this machine: it must have the GPUs.

    With `verl.ray_address` (or Ray's own `RAY_ADDRESS`) the GPUs are the Ray cluster's, which
    Ray places; this machine may be a CPU-only head node, so nothing is checked here.
    """
    cluster = config.verl
    if cluster.device == "cpu" or cluster.ray_address or os.environ.get("RAY_ADDRESS"):
        return
    if cluster.nnodes > 1:
        raise MarsError(
            f"verl.nnodes is {cluster.nnodes}, but without verl.ray_address verl starts a Ray "
            "cluster of this machine only; start Ray on every node and set verl.ray_address"
        )
    found = gpu_count()
    if found == 0:
        raise MarsError(
            "no GPU on this machine: the verl backend trains on CUDA GPUs (or a Ray cluster "
            "given by verl.ray_address); on a CPU use --device cpu (verl on this CPU) or "
            "`mars train --trainer local`, or check the setup with --dry-run"
        )
    if found < cluster.n_gpus_per_node:
        raise MarsError(
            f"verl.n_gpus_per_node is {cluster.n_gpus_per_node} but this machine has {found} "
            f"GPU(s); set verl.n_gpus_per_node: {found} in the --config file"
        )


def main_ppo_command(overrides: Sequence[str], python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "verl.trainer.main_ppo", *overrides]


def shell_line(command: Sequence[str], env: dict[str, str]) -> str:
    assignments = [f"{key}={shlex.quote(value)}" for key, value in env.items()]
    return " ".join([*assignments, shlex.join(command)])


def launch_environment(paths: RunPaths, device: str = "cuda") -> dict[str, str]:
    """The driver's environment: the plugin, the metrics file, and this checkout importable."""
    env = dict(os.environ)
    env.update(worker_environment(paths, device))
    source_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if device == "cpu":
        # Ray prestarts a worker per CPU for the default runtime environment, which verl's actors
        # (each with the run's own variables) never use: on a two-core machine they cost 10% of a
        # short run's CPU time.
        env.update(CPU_RAY_ENVIRONMENT)
    return env


def preflight(config: TrainConfig, *, dry_run: bool, machine: Machine | None = None) -> Report:
    """What must hold before a run directory is made: verl importable, GPUs for a real launch,
    and the preflight's stack, attention and context checks (preflight.py) on the config verl
    will read (paths stand in for the run directory, which does not exist yet)."""
    require_verl()
    if not dry_run:
        require_gpus(config)
    stand_in = RunPaths(Path(tempfile.gettempdir()) / "mars-preflight")
    composed = check_overrides(verl_overrides(config, stand_in), validate=False)
    report = Report(config_rows(config, composed, dry_run=dry_run, machine=machine or Machine()))
    report.refuse()
    return report


def run_verl(
    config: TrainConfig, run: RunDir, *, dry_run: bool, machine: Machine | None = None
) -> None:
    try:
        _run_verl(config, run, dry_run=dry_run, machine=machine or Machine())
    except MarsError:
        if run.info_path.is_file():  # started by the caller
            run.finish(RunStatus.FAILED)
        raise


def _run_verl(config: TrainConfig, run: RunDir, *, dry_run: bool, machine: Machine) -> None:
    require_verl()
    if not dry_run:
        require_gpus(config)
    paths = RunPaths(Path(run.path))
    overrides = verl_overrides(config, paths)
    # A launch leaves verl's own validation to main_ppo, which runs it first thing; importing
    # verl here for it would cost seconds of every start.
    composed = check_overrides(overrides, validate=dry_run)
    report = Report(config_rows(config, composed, dry_run=dry_run, machine=machine))
    report.rows += run_dir_rows(composed, machine)
    print(report.table())
    report.refuse()  # before the dataset, the command file and Ray
    write_dataset(config, paths.dataset)
    command = main_ppo_command(overrides)
    line = shell_line(command, worker_environment(paths, config.verl.device))
    paths.command_file.write_text("#!/bin/sh\n" + line + "\n")
    print(line)
    if dry_run:
        return
    keep_earlier_metrics(paths.verl_metrics)
    environment = launch_environment(paths, config.verl.device)
    train(command, environment, paths, publisher_of(config, paths))


def publisher_of(config: TrainConfig, paths: RunPaths) -> CheckpointPublisher | PolicyPublishers:
    """Who publishes the run's checkpoints: into `RUN/checkpoints/`, or in a job of several
    policies each policy's into its own `RUN/policies/<name>/checkpoints/`, as the CPU trainer
    lays them out (`mars eval --trained` reads either)."""
    details = {"config": config.model_dump(mode="json")}
    spec = job_spec(config)
    if spec is None:
        return CheckpointPublisher(
            run_dir=paths.root.resolve(),
            verl_checkpoints=paths.verl_checkpoints,
            checkpoints=paths.checkpoints,
            logs=paths.logs,
            details={"base_model": config.model, **details},
            metrics_file=paths.verl_metrics,
            dtype=model_dtype(config.model),
            adapter=adapter_target(config),
        )
    adapter = adapter_target(config)
    return PolicyPublishers(
        {
            policy.name: CheckpointPublisher(
                run_dir=paths.root.resolve(),
                verl_checkpoints=paths.verl_checkpoints,
                checkpoints=policy_root(paths.root, policy.name, True) / "checkpoints",
                logs=paths.logs / "policies" / policy.name,
                details={"base_model": policy.model, "policy": policy.name, **details},
                metrics_file=paths.verl_metrics,
                dtype=model_dtype(policy.model),
                adapter=replace(adapter, name=policy.name) if adapter else None,
                actor=actor_folder(spec, policy.name),
            )
            for policy in spec.policies
        }
    )


def keep_earlier_metrics(path: Path) -> Path | None:
    """verl's file logger truncates its file; a resumed run keeps the earlier attempt's lines."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    attempt = 1
    while (kept := path.with_name(f"{path.stem}.attempt{attempt}{path.suffix}")).exists():
        attempt += 1
    path.rename(kept)
    return kept


def check_overrides(overrides: list[str], *, validate: bool = True) -> Any:
    """verl's config composed (and validated) with its own files; its chatter stays out of the
    way. Returns the composed DictConfig."""
    from train_backend.verl.compose import compose_verl_config

    with contextlib.redirect_stdout(io.StringIO()):
        return compose_verl_config(overrides, validate=validate)


RUN_MARK = "MARS_VERL_LAUNCH"  # in verl's environment, inherited by everything it starts


def launched_processes(session: int, mark: str) -> list[int]:
    """Processes verl started: those in its session, and those carrying `mark` in their
    environment (Linux /proc; [] elsewhere).

    verl runs in its own session; Ray's workers move to process groups of their own inside it,
    and a worker Ray forks while verl is being stopped may start a session of its own, so the
    environment mark catches what the session misses.
    """
    marker = f"{RUN_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        if int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            # After the command name in parentheses: state, ppid, pgrp, session, ...
            fields = stat[stat.rindex(")") + 2 :].split()
            if (len(fields) > 3 and int(fields[3]) == session) or marker in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def stop_launched(session: int, mark: str, grace_s: float, kill_rounds: int = 10) -> None:
    """SIGTERM every process verl left, then SIGKILL what outlives `grace_s`, again until none
    is left (a dying parent may have forked one more) or `kill_rounds` sweeps have passed."""
    pids = launched_processes(session, mark)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = launched_processes(session, mark)
    for _ in range(kill_rounds):
        if not pids:
            return
        _signal_all(pids, signal.SIGKILL)
        time.sleep(0.2)
        pids = launched_processes(session, mark)


def _tee(stream: IO[bytes], log_path: Path, echo: IO[str] | None) -> None:
    with log_path.open("ab") as log:
        for line in iter(stream.readline, b""):
            log.write(line)
            log.flush()
            if echo is not None:
                echo.write(line.decode(errors="replace"))
                echo.flush()


def train(
    command: Sequence[str],
    env: dict[str, str],
    paths: RunPaths,
    publisher: CheckpointPublisher | PolicyPublishers,
    *,
    poll_seconds: float = POLL_SECONDS,
    echo: IO[str] | None = sys.stdout,
) -> None:
    """Run verl to the end, publishing each checkpoint as it lands; MarsError if anything failed."""
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.verl_dir.mkdir(parents=True, exist_ok=True)
    log_path = paths.logs / "verl.log"
    with log_path.open("ab") as log:
        log.write(f"$ {shlex.join(command)}\n".encode())
    mark = uuid.uuid4().hex
    env = {**env, RUN_MARK: mark}
    try:
        process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=paths.verl_dir,  # verl's relative outputs (traces, dumps) stay in the run
            start_new_session=True,
        )
    except OSError as exc:
        raise MarsError(f"cannot start verl ({command[0]}): {exc.strerror}") from exc
    assert process.stdout is not None
    tee = threading.Thread(target=_tee, args=(process.stdout, log_path, echo), daemon=True)
    tee.start()
    try:
        while process.poll() is None:
            publisher.publish_new()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(poll_seconds)
    except BaseException:
        stop_process_group(process, STOP_GRACE_SECONDS)
        raise
    finally:
        # verl's session leader is gone; whatever Ray left in its session goes too.
        stop_launched(process.pid, mark, SESSION_GRACE_SECONDS)
        tee.join(timeout=5)
    publisher.publish_new()  # the last step is saved just before verl exits
    if process.returncode != 0:
        raise MarsError(
            f"verl exited with code {process.returncode}; last lines of {log_path}: "
            f"{log_tail(log_path)}"
        )
    if publisher.failures:
        raise MarsError(
            "training finished but checkpoints were not published: " + publisher.failure_report()
        )
