"""The runs under the root: what each is (kind, model, MAS, status) and the runs table."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.errors import MarsError
from core.runstore import RECORDS_FILE, RUN_FILE, RunDir
from dashboard.data.files import CURVE_FILES, METRICS_FILE
from dashboard.paths import PathRefused, inside_root, relative_name
from harness.failures import FAILURES_FILE


@dataclass
class RunEntry:
    name: str  # path relative to the runs root
    path: Path
    kind: str
    model: str | None
    started_at: str | None
    ended_at: str | None
    status: str
    attempts: int
    config: dict[str, Any]

    @property
    def mas(self) -> str:
        return str(self.config.get("mas") or "-")

    @property
    def has_records(self) -> bool:
        return (self.path / RECORDS_FILE).is_file()

    @property
    def has_failures(self) -> bool:
        return (self.path / FAILURES_FILE).is_file()

    @property
    def has_metrics(self) -> bool:
        return (self.path / METRICS_FILE).is_file()

    @property
    def curve_file(self) -> Path | None:
        for name in CURVE_FILES:
            if (self.path / name).is_file():
                return self.path / name
        return None

    @property
    def model_label(self) -> str:
        """The model name, shortened to its last path part (served folders are full paths)."""
        if not self.model:
            return "-"
        return Path(self.model).name if "/" in self.model else self.model


@dataclass
class RunScan:
    entries: list[RunEntry] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (name, why), never hidden


# How deep below the root a run.json is looked for: the demo's loop evaluations sit at
# <root>/demo-TIME/loop/step_N-exploit-kuhn_poker/.
MAX_DEPTH = 4
# Folders that never hold a run (weights, caches): not walked into.
SKIPPED_DIRS = frozenset({"checkpoints", "__pycache__", "node_modules"})


def run_dirs(root: Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Every folder with a run.json from the root's children down to `max_depth` levels, a run's
    own sub-runs included (a loop's evaluations). A symlinked folder is looked at but not walked
    into (no cycles); hidden folders and `SKIPPED_DIRS` are left out."""
    found: list[Path] = []
    level = [Path(root)]
    for _ in range(max_depth):
        below: list[Path] = []
        for folder in level:
            try:
                children = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for child in children:
                if child.name.startswith(".") or child.name in SKIPPED_DIRS:
                    continue
                try:
                    if not child.is_dir():
                        continue
                    symlink = child.is_symlink()
                except OSError:
                    continue
                path = Path(child.path)
                if (path / RUN_FILE).is_file():
                    found.append(path)
                if not symlink:
                    below.append(path)
        level = below
    return sorted(found)


def scan_runs(root: Path) -> RunScan:
    """Every run directory under the root (`run_dirs`: nested ones too), newest first, and the
    ones that could not be read (a broken run.json, a path that leaves the root), with why.
    """
    root = Path(root).resolve()
    scan = RunScan()
    for found in run_dirs(root):
        try:
            path = inside_root(root, found)
            info = RunDir.read_info(path)
        except PathRefused:
            scan.unreadable.append((_name_of(root, found), "leaves the runs root"))
            continue
        except (MarsError, OSError, ValueError) as exc:  # a broken run.json
            scan.unreadable.append((_name_of(root, found), " ".join(str(exc).split())))
            continue
        scan.entries.append(
            RunEntry(
                name=relative_name(root, path),
                path=path,
                kind=info.kind,
                model=info.model,
                started_at=info.started_at,
                ended_at=info.ended_at,
                status=info.status,
                attempts=info.attempts,
                config=info.config or {},
            )
        )
    scan.entries.sort(key=lambda e: (e.started_at or "", e.name), reverse=True)
    scan.unreadable.sort()
    return scan


def _name_of(root: Path, path: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


def discover_runs(root: Path) -> list[RunEntry]:
    """The readable runs of `scan_runs`, newest first (a run reached through a symlink that
    leaves the root is not one of them)."""
    return scan_runs(root).entries


def runs_table(entries: Sequence[RunEntry], record_counts: dict[str, int]) -> pd.DataFrame:
    rows = [
        {
            "run": e.name,
            "kind": e.kind,
            "model": e.model_label,
            "mas": e.mas if e.kind == "eval" else "-",
            "started": (e.started_at or "-").replace("T", " ")[:19],
            "status": e.status,
            "attempts": e.attempts,
            "lines": record_counts.get(e.name, 0),
        }
        for e in entries
    ]
    columns = ["run", "kind", "model", "mas", "started", "status", "attempts", "lines"]
    return pd.DataFrame(rows, columns=columns)
