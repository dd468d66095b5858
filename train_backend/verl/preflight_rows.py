"""The preflight's pieces (preflight.py): a check's row, the report of all of them, and what the
checks ask this machine rather than its files (CUDA, free disk, GPU memory), which tests replace.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import MarsError
from train_backend.verl.names import VERL_VERSION

OK, REFUSED, WARNING, UNCHECKED = "ok", "refused", "warning", "not checked"


def local_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def local_gpu_memory() -> int | None:
    """Bytes of memory of this machine's first GPU; None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


@dataclass(frozen=True)
class Machine:
    """What the preflight asks this machine rather than its files."""

    cuda: Callable[[], bool] = local_cuda
    disk_free: Callable[[Path], int] = free_bytes
    gpu_memory: Callable[[], int | None] = local_gpu_memory


@dataclass(frozen=True)
class Row:
    check: str
    found: str
    verdict: str
    note: str = ""  # for a refusal: what is wrong and the fix, in one sentence
    want: str = ""  # what the check accepts, when it is a range


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def refuse(self) -> None:
        refused = [row.note for row in self.rows if row.verdict == REFUSED]
        if refused:
            raise MarsError("preflight: " + "; ".join(refused))

    def table(self) -> str:
        width = max([len(row.check) for row in self.rows] + [5])
        lines = [f"preflight (verl {VERL_VERSION}):"]
        for row in self.rows:
            line = f"  {row.check:<{width}}  {row.verdict:<11}  {row.found}"
            if row.want:
                line += f" ({row.want})"
            if row.note and row.verdict != OK:
                line += f" -- {row.note}"
            lines.append(line)
        return "\n".join(lines)


def gb(size: float) -> str:
    return f"{size / 1e9:.1f} GB"
