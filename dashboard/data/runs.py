"""The runs under the root: what each is (kind, model, MAS, status) and the runs table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.runstore import RECORDS_FILE
from core.runstore import scan_runs as runstore_scan
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


def scan_runs(root: Path) -> RunScan:
    """Every run directory under the root (`core.runstore.scan_runs`), newest first, and the
    ones that could not be read (a broken run.json, a path that leaves the root), with why.
    """
    root = Path(root).resolve()
    scan = RunScan()
    found, broken = runstore_scan(root)
    for item in broken:
        scan.unreadable.append((_name_of(root, item.path), " ".join(item.reason.split())))
    for run in found:
        try:
            path = inside_root(root, run.path)
            info = run.info()
        except PathRefused:
            scan.unreadable.append((_name_of(root, run.path), "leaves the runs root"))
            continue
        except Exception as exc:  # a run.json that broke after listing
            scan.unreadable.append((_name_of(root, run.path), " ".join(str(exc).split())))
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
