"""The checkpoint folder contract, read by every layer that finds checkpoints.

    CHECKPOINTS/step_N/      N = the number of updates made, no padding
        checkpoint.json      {"step", "run_dir", "config", "metrics"}: written last

A checkpoint holds either a whole Hugging Face model or one LoRA adapter
(`adapter_config.json` + `adapter_model.safetensors`, PEFT's layout) over a base model that
`checkpoint.json` names: `"adapter": {"kind", "name", "base", "base_fingerprint"}` (the base's
folder, or hub id, and `core.fingerprints.model_fingerprint` of it when the adapter was saved).

A writer builds `step_N/` under a hidden temporary name and renames it into place, and writes
`checkpoint.json` last inside it, so a folder is a checkpoint exactly when it is named `step_N`
and holds `checkpoint.json`. The CPU trainer writes this layout (train_backend.local.checkpoint),
the verl backend publishes into it (train_backend.verl.checkpoints), and `mars loop` and the
dashboard read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import MarsError

CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_FILE = "checkpoint.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def step_dir_name(step: int) -> str:
    return f"step_{step}"


def step_of(name: str) -> int | None:
    """N for a folder named `step_N`, else None."""
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def complete_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint directly in `folder`, by step ascending."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        step = step_of(child.name)
        if step is not None and (child / CHECKPOINT_FILE).is_file():
            found.append((step, child))
    return sorted(found)


def read_checkpoint(folder: Path) -> dict[str, Any]:
    """A checkpoint's checkpoint.json; one line of MarsError if it cannot be read."""
    path = Path(folder) / CHECKPOINT_FILE
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MarsError(f"cannot read {path}: {exc}") from exc
    if not isinstance(value, dict):
        raise MarsError(f"cannot read {path}: not a JSON object")
    return value


@dataclass(frozen=True)
class AdapterInfo:
    """What an adapter checkpoint sits on."""

    name: str  # the adapter's (policy's) name
    base: str  # the base model's folder or hub id
    base_fingerprint: str | None  # the base's fingerprint when the adapter was saved
    kind: str = "lora"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "base": self.base,
            "base_fingerprint": self.base_fingerprint,
        }


def is_adapter(folder: Path) -> bool:
    """Whether `folder` holds an adapter rather than a whole model."""
    return (Path(folder) / ADAPTER_CONFIG_FILE).is_file()


def adapter_info(folder: Path) -> AdapterInfo | None:
    """The adapter in `folder` and its base; None for a whole model. A PEFT folder that no
    `mars` trainer wrote names its base in adapter_config.json (no fingerprint then)."""
    folder = Path(folder)
    if not is_adapter(folder):
        return None
    recorded: dict[str, Any] = {}
    if (folder / CHECKPOINT_FILE).is_file():
        recorded = read_checkpoint(folder).get("adapter") or {}
    if recorded.get("base"):
        return AdapterInfo(
            name=str(recorded.get("name") or folder.name),
            base=str(recorded["base"]),
            base_fingerprint=recorded.get("base_fingerprint"),
            kind=str(recorded.get("kind") or "lora"),
        )
    try:
        peft_config = json.loads((folder / ADAPTER_CONFIG_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise MarsError(f"cannot read {folder / ADAPTER_CONFIG_FILE}: {exc}") from exc
    base = peft_config.get("base_model_name_or_path") if isinstance(peft_config, dict) else None
    if not base:
        raise MarsError(f"adapter {folder} names no base model (base_model_name_or_path)")
    return AdapterInfo(name=folder.name, base=str(base), base_fingerprint=None)


def checked_adapter(folder: Path) -> AdapterInfo:
    """The adapter in `folder`, refused in one line when its base is missing or has changed
    since the adapter was trained on it (an adapter on other weights is another model)."""
    from core.fingerprints import model_fingerprint, recorded_weights_match

    info = adapter_info(folder)
    if info is None:
        raise MarsError(f"{folder} holds no adapter (no {ADAPTER_CONFIG_FILE})")
    base = Path(info.base).expanduser()
    if info.base.startswith(("/", ".", "~")) and not base.is_dir():
        raise MarsError(f"adapter {folder}: its base model {info.base} is not there")
    if info.base_fingerprint and not recorded_weights_match(info.base_fingerprint, info.base):
        raise MarsError(
            f"adapter {folder}: its base {info.base} has changed since the adapter was trained "
            f"(fingerprint {model_fingerprint(info.base)}, trained on {info.base_fingerprint})"
        )
    return info
