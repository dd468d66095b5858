"""From verl's sharded checkpoints to the run's Hugging Face checkpoints that `mars loop` watches.

verl saves the actor under `<default_local_dir>/global_step_N/actor/` and then writes
`latest_checkpointed_iteration.txt`, so every step up to the number in that file is complete. For
each such step the publisher runs verl's merger into a hidden staging folder

    python -m verl.model_merger merge --backend fsdp --local_dir .../global_step_N/actor \
        --target_dir RUN/checkpoints/.step_N.tmp-PID

casts the weights back to the base model's dtype (the merger always writes bf16), writes
`checkpoint.json` into it last, and renames it to `RUN/checkpoints/step_N/`: the layout of
`train_backend.local.checkpoint` (the contract shared with `mars loop` and the dashboard), where a
folder without `checkpoint.json` is never a checkpoint. Steps already published are skipped, so a
resumed run publishes only what is new. A LoRA run (`adapter`) publishes the adapter alone
instead of a merged model (adapter_export.py), and `checkpoint.json` names its base.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.checkpoints import CHECKPOINT_FILE, step_dir_name, step_of
from core.errors import MarsError
from core.files import jsonl_slots, write_json_atomic

if TYPE_CHECKING:
    from train_backend.verl.adapter_export import AdapterTarget

CHECKPOINT_SCHEMA_VERSION = 1
LATEST_FILE = "latest_checkpointed_iteration.txt"
MERGE_ATTEMPTS = 3  # a failed merge is retried on the next polls, this many attempts in all
_STEP_DIR = re.compile(r"^global_step_(\d+)$")

# (command, log file, environment) -> exit code
Runner = Callable[[list[str], Path, dict[str, str]], int]
# (verl's actor folder, the folder to write, the base model) -> None; raises on failure
Exporter = Callable[[Path, Path, str], None]


def merge_command(actor_dir: Path, target_dir: Path, python: str | None = None) -> list[str]:
    return [
        python or sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor_dir),
        "--target_dir",
        str(target_dir),
    ]


def merge_environment() -> dict[str, str]:
    """The merger needs verl alone: without the project's plugin it starts seconds sooner."""
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    env["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    return env


def run_logged(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """Run `command` with its output in `log_path`; its exit code."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        try:
            return subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                check=False,
            ).returncode
        except OSError as exc:
            log.write(f"cannot start: {exc}\n".encode())
            return 127


def latest_saved_step(verl_checkpoints: Path) -> int | None:
    try:
        text = (verl_checkpoints / LATEST_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def saved_steps(verl_checkpoints: Path, actor: str = "actor") -> list[int]:
    """Steps whose actor checkpoint (in a job of several policies, the policy's `actor`
    folder) verl has finished writing, ascending."""
    latest = latest_saved_step(verl_checkpoints)
    if latest is None or not verl_checkpoints.is_dir():
        return []
    steps = []
    for entry in verl_checkpoints.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match and int(match.group(1)) <= latest and (entry / actor).is_dir():
            steps.append(int(match.group(1)))
    return sorted(steps)


def model_dtype(model: str | None) -> str | None:
    """The dtype a Hugging Face model's config names ("float32", ...), None if unknown."""
    if model is None:
        return None
    local = Path(model).expanduser() / "config.json"
    try:
        if local.is_file():
            config = json.loads(local.read_text())
        else:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(model).to_dict()
    except (OSError, ValueError):
        return None
    dtype = config.get("dtype") or config.get("torch_dtype")
    return str(dtype).removeprefix("torch.") if dtype else None


def restore_dtype(model_dir: Path, dtype: str) -> int:
    """Cast the floating-point weights in `model_dir` to `dtype`; how many tensors changed.

    A file whose floating-point tensors already have that dtype (the merger writes bf16, the
    dtype of most base models) is left as it is: rewriting it would cost a full copy of the
    weights for nothing.
    """
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    target = getattr(torch, dtype, None)
    if not isinstance(target, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    # safetensors' names of floating-point dtypes; integer tensors are never cast
    floats = {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    }  # fmt: skip
    changed = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:  # reads the header only
            dtypes = {handle.get_slice(name).get_dtype() for name in handle.keys()}  # noqa: SIM118
        if all(floats.get(name, target) == target for name in dtypes):
            continue
        tensors = load_file(path)
        cast = {}
        for name, tensor in tensors.items():
            if tensor.is_floating_point() and tensor.dtype != target:
                tensor = tensor.to(target)
                changed += 1
            cast[name] = tensor.contiguous()
        save_file(cast, path, metadata={"format": "pt"})
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text())
    updated = {k: dtype for k in ("dtype", "torch_dtype") if k in config or k == "dtype"}
    if any(config.get(k) != v for k, v in updated.items()):
        config.update(updated)
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return changed


class CheckpointPublisher:
    """Merges each finished verl step into `checkpoints/step_N/` and marks it done."""

    def __init__(
        self,
        *,
        run_dir: Path,
        verl_checkpoints: Path,
        checkpoints: Path,
        logs: Path,
        details: dict[str, Any] | None = None,
        metrics_file: Path | None = None,
        runner: Runner = run_logged,
        dtype: str | None = None,
        adapter: AdapterTarget | None = None,
        exporter: Exporter | None = None,
        actor: str = "actor",
    ) -> None:
        self.run_dir = run_dir
        self.verl_checkpoints = verl_checkpoints
        self.checkpoints = checkpoints
        self.logs = logs
        self.details = dict(details or {})  # e.g. the training config, the base model
        self.metrics_file = metrics_file
        self.runner = runner
        self.dtype = dtype  # the base model's: merged weights are cast back to it
        self.adapter = adapter  # a LoRA run: only the adapter is published (adapter_export.py)
        self.exporter = exporter
        self.actor = actor  # the folder of a verl step that holds this policy's actor
        self._adapter_info: dict[str, Any] | None = None
        self.failures: dict[int, str] = {}  # step -> why its last merge attempt failed
        self.attempts: dict[int, int] = {}

    def step_dir(self, step: int) -> Path:
        return self.checkpoints / step_dir_name(step)

    def is_published(self, step: int) -> bool:
        return (self.step_dir(step) / CHECKPOINT_FILE).is_file()

    def publish_new(self) -> list[int]:
        """Publish every finished step not yet published; a failed merge is tried again on later
        calls, `MERGE_ATTEMPTS` times in all (while verl still keeps that step's checkpoint)."""
        done = []
        for step in saved_steps(self.verl_checkpoints, self.actor):
            if self.is_published(step) or self.attempts.get(step, 0) >= MERGE_ATTEMPTS:
                continue
            self.attempts[step] = self.attempts.get(step, 0) + 1
            if self.publish(step):
                self.failures.pop(step, None)
                done.append(step)
        return done

    def gaps(self) -> list[int]:
        """Failed steps below a published one: holes in checkpoints/ that `mars loop` skips."""
        names = (path.name for path in self.checkpoints.glob("step_*"))
        steps = [step for step in map(step_of, names) if step is not None]
        latest = max((step for step in steps if self.is_published(step)), default=-1)
        return sorted(step for step in self.failures if step < latest)

    def failure_report(self) -> str:
        """One line: each step not published and why, and the gaps they leave."""
        failed = "; ".join(
            f"step {step}: {why} ({self.attempts.get(step, 1)} attempt(s))"
            for step, why in sorted(self.failures.items())
        )
        gaps = self.gaps()
        if gaps:
            failed += f"; checkpoints/ has no step_{', step_'.join(map(str, gaps))} between "
            failed += "published steps"
        return failed

    def publish(self, step: int) -> bool:
        actor_dir = self.verl_checkpoints / f"global_step_{step}" / self.actor
        final = self.step_dir(step)
        staging = self.checkpoints / f".step_{step}.tmp-{os.getpid()}"
        log_path = self.logs / f"merge-step_{step}.log"
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        extra: dict[str, Any] = {}
        if self.adapter is not None:
            if not self._export_adapter(step, actor_dir, staging):
                return False
            extra["adapter"] = self._adapter_info
        else:
            code = self.runner(merge_command(actor_dir, staging), log_path, merge_environment())
            if code != 0 or not (staging / "config.json").is_file():
                shutil.rmtree(staging, ignore_errors=True)
                why = f"exited with code {code}" if code != 0 else "wrote no model"
                self.failures[step] = f"the merger {why} (log: {log_path})"
                return False
        if self.dtype is not None and self.adapter is None:
            try:
                restore_dtype(staging, self.dtype)
            except (OSError, ValueError, RuntimeError) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                self.failures[step] = f"casting the merged weights to {self.dtype} failed: {exc}"
                return False
        record = {
            "schema_version": CHECKPOINT_SCHEMA_VERSION,
            "step": step,
            "run_dir": str(self.run_dir),
            "source": "verl",
            "model_dir": str(final),
            "verl_actor_dir": str(actor_dir),
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "metrics": self.logged_metrics(step),
            **self.details,
            **extra,
        }
        write_json_atomic(staging / CHECKPOINT_FILE, record, sort_keys=True, fsync=True)
        if final.exists():  # a merge that died before its checkpoint.json: replace it
            shutil.rmtree(final)
        staging.rename(final)
        return True

    def _export_adapter(self, step: int, actor_dir: Path, staging: Path) -> bool:
        """The adapter alone into `staging` (in this process: a few tensors, no model)."""
        from train_backend.verl.adapter_export import export_adapter

        assert self.adapter is not None
        try:
            if self._adapter_info is None:  # the base does not change during a run
                self._adapter_info = self.adapter.info().as_json()
            (self.exporter or export_adapter)(actor_dir, staging, self.adapter.base)
        except (OSError, ValueError, RuntimeError, KeyError, MarsError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            self.failures[step] = f"exporting the adapter failed: {exc}"
            return False
        return True

    def logged_metrics(self, step: int) -> dict[str, Any]:
        """What verl's file logger has recorded for `step` so far ({} if nothing yet)."""
        if self.metrics_file is None:
            return {}
        try:
            entries = jsonl_slots(self.metrics_file)
        except OSError:
            return {}
        for entry in reversed(entries):
            if entry is not None and entry.get("step") == step:
                data = entry.get("data")
                return data if isinstance(data, dict) else {}
        return {}


class PolicyPublishers:
    """The publishers of a job with several policies, one per policy, used as one."""

    def __init__(self, publishers: dict[str, CheckpointPublisher]) -> None:
        self.publishers = publishers

    @property
    def failures(self) -> dict[str, dict[int, str]]:
        return {name: own.failures for name, own in self.publishers.items() if own.failures}

    def publish_new(self) -> list[int]:
        return sorted({step for own in self.publishers.values() for step in own.publish_new()})

    def failure_report(self) -> str:
        return "; ".join(
            f"policy {name}: {own.failure_report()}"
            for name, own in self.publishers.items()
            if own.failures
        )
