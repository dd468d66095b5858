"""Children started in their own process group: stopping the whole group, a log's tail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group, wait `grace_s`, then SIGKILL it; a process already gone is left alone."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def log_tail(path: Path, n: int = 5) -> str:
    """The last `n` non-blank lines of a log on one line, for an error message."""
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in lines[-n:] if line.strip()) or "(empty log)"
