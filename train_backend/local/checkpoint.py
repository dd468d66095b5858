"""Checkpoints of the CPU trainer, in the folder contract of `core.checkpoints`.

    RUN/checkpoints/step_N/            N = the number of updates made, no padding
        config.json, model.safetensors, generation_config.json   the Hugging Face model
          (or, for a LoRA adapter: adapter_config.json, adapter_model.safetensors)
        tokenizer.json, tokenizer_config.json, chat_template.jinja, ...
        trainer_state.pt               optimizer state, RNG states, step (for resume only)
        checkpoint.json                {"step", "run_dir", "config", "metrics"}: written last

The folder is built under a hidden temporary name (`.step_N.tmp-PID`) and renamed into place, so a
reader that sees `step_N/` sees it whole; `checkpoint.json` is written last inside it as a second
guard. A folder without `checkpoint.json` is never treated as a checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.checkpoints import (
    CHECKPOINT_FILE,
    CHECKPOINTS_DIR,
    complete_checkpoints,
    step_dir_name,
)
from core.errors import MarsError

if TYPE_CHECKING:
    from core.causal_lm import Policy

TRAINER_STATE_FILE = "trainer_state.pt"


def checkpoints_root(run_path: Path) -> Path:
    return Path(run_path) / CHECKPOINTS_DIR


def checkpoint_path(run_path: Path, step: int) -> Path:
    return checkpoints_root(run_path) / step_dir_name(step)


def list_checkpoints(run_path: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (with checkpoint.json), by step ascending."""
    return complete_checkpoints(checkpoints_root(run_path))


def latest_checkpoint(run_path: Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_path)
    return found[-1] if found else None


def remove_partial(run_path: Path) -> None:
    """Drop temporary folders left by a save that was killed half-way."""
    root = checkpoints_root(run_path)
    if root.is_dir():
        for child in root.iterdir():
            if child.name.startswith(".step_") and ".tmp-" in child.name:
                shutil.rmtree(child, ignore_errors=True)


def save_checkpoint(
    run_path: Path,
    step: int,
    policy: Policy,
    *,
    trainer_state: dict[str, Any],
    config: dict[str, Any],
    metrics: dict[str, Any],
    adapter_base: str | None = None,
) -> Path:
    """Write `RUN/checkpoints/step_N/` atomically and return its path. An adapter policy saves
    its adapter only, naming `adapter_base` (the base model's folder) in checkpoint.json."""
    import torch
    from transformers.utils import logging as hf_logging

    root = checkpoints_root(run_path)
    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(run_path, step)
    staging = root / f".step_{step}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        adapter = None
        if policy.adapter is not None:
            from train_backend.local.adapters import save_adapter

            if adapter_base is None:
                raise MarsError("an adapter checkpoint must name its base model")
            adapter = save_adapter(policy, staging, base=adapter_base).as_json()
        else:
            policy.model.save_pretrained(staging, safe_serialization=True)
            policy.tokenizer.save_pretrained(staging)
        keep_tokenizer_class(Path(policy.source), staging)
        torch.save(trainer_state, staging / TRAINER_STATE_FILE)
        info = {
            "step": step,
            "run_dir": str(Path(run_path).resolve()),
            "config": config,
            "metrics": metrics,
        }
        if adapter is not None:
            info["adapter"] = adapter
        (staging / CHECKPOINT_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)
        if final.exists():  # a resumed run saving the same step again: swap, then drop the old
            old = root / f".step_{step}.old-{os.getpid()}"
            final.rename(old)
            staging.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(final)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
        shutil.rmtree(staging, ignore_errors=True)
    return final


def load_trainer_state(folder: Path) -> dict[str, Any]:
    import torch

    path = Path(folder) / TRAINER_STATE_FILE
    if not path.is_file():
        raise MarsError(f"{folder} has no {TRAINER_STATE_FILE}; it cannot be resumed from")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError) as exc:
        raise MarsError(f"cannot read {path}: {exc}") from exc


def keep_tokenizer_class(source: Path, folder: Path) -> None:
    """Name the tokenizer class the source folder named (e.g. one transformers 4.x also knows).

    transformers 5 writes its own new class name, which older transformers (vLLM images) and
    serving stacks may not resolve; the source's name loads in both.
    """
    source_config, saved_config = source / "tokenizer_config.json", folder / "tokenizer_config.json"
    if not (source_config.is_file() and saved_config.is_file()):
        return
    wanted = json.loads(source_config.read_text()).get("tokenizer_class")
    saved = json.loads(saved_config.read_text())
    if wanted:
        saved["tokenizer_class"] = wanted
    for machine_specific in ("is_local", "local_files_only"):
        saved.pop(machine_specific, None)
    saved_config.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
