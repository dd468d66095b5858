"""The checkpoint folder contract, read by every layer that finds checkpoints.

    CHECKPOINTS/step_N/      N = the number of updates made, no padding
        checkpoint.json      {"step", "run_dir", "config", "metrics"}: written last

A writer builds `step_N/` under a hidden temporary name and renames it into place, and writes
`checkpoint.json` last inside it, so a folder is a checkpoint exactly when it is named `step_N`
and holds `checkpoint.json`. The CPU trainer writes this layout (train_backend.local.checkpoint),
the verl backend publishes into it (train_backend.verl.checkpoints), and `mars loop` and the
dashboard read it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from core.errors import MarsError

CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_FILE = "checkpoint.json"
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
