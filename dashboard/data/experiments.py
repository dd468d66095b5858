"""Experiments (`mars experiment`): the folders under the root that hold one, each part's state,
and the report the experiment wrote (EXP/report.md, laid out like the paper's tables).

Read from the files alone: EXP/experiment.json (the experiment as run, each part's status,
attempts and wall time) and EXP/report.md. Nothing outside the root is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dashboard.data.files import read_json
from dashboard.paths import PathRefused, inside_root

STATE_FILE = "experiment.json"
REPORT_FILE = "report.md"
MAX_DEPTH = 3  # root/experiments/NAME/experiment.json at most
PART_COLUMNS = ["part", "status", "attempts", "minutes", "exit code"]


@dataclass(frozen=True)
class ExperimentEntry:
    name: str  # the folder, relative to the root
    path: Path
    state: dict[str, Any]


def find_experiments(root: Path) -> list[ExperimentEntry]:
    """Every folder under `root` (at most MAX_DEPTH down) that holds an experiment.json."""
    root = Path(root)
    if not root.is_dir():
        return []
    found: list[ExperimentEntry] = []
    frontier = [root]
    for _ in range(MAX_DEPTH + 1):
        following: list[Path] = []
        for folder in frontier:
            state = read_json(folder / STATE_FILE)
            if state is not None:
                name = folder.relative_to(root).as_posix() if folder != root else root.name
                found.append(ExperimentEntry(name, folder, state))
                continue  # an experiment's parts are runs, not experiments
            try:
                following += sorted(child for child in folder.iterdir() if child.is_dir())
            except OSError:
                continue
        frontier = following
    return sorted(found, key=lambda entry: entry.name)


def parts_table(state: dict[str, Any]) -> pd.DataFrame:
    """One row per part: its last status, attempts, wall time and exit code."""
    parts = state.get("parts") if isinstance(state.get("parts"), dict) else {}
    rows = [
        {
            "part": name,
            "status": part.get("status"),
            "attempts": part.get("attempts"),
            "minutes": round(float(part.get("wall_s") or 0.0) / 60, 1),
            "exit code": part.get("exit_code"),
        }
        for name, part in parts.items()
        if isinstance(part, dict)
    ]
    return pd.DataFrame(rows, columns=PART_COLUMNS)


def report_text(root: Path, entry: ExperimentEntry) -> str | None:
    """The experiment's report.md, or None when it has not written one (or it lies outside)."""
    try:
        path = inside_root(root, entry.path / REPORT_FILE)
        return path.read_text() if path.is_file() else None
    except (PathRefused, OSError, UnicodeDecodeError):
        return None
