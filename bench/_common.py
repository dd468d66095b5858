"""Helpers shared by the bench scripts: a scripted server in its own process, JSON result lines."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def scripted_server_process(delay_s: float, text: str | None = None) -> Iterator[str]:
    """Start the scripted server as a separate process (so its CPU is not counted as ours)."""
    command = [sys.executable, "-m", "harness.testing.scripted_server", "--delay", str(delay_s)]
    if text is not None:
        command += ["--text", text]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def report(
    metric: str, value: float, target: float, *, lower_is_better: bool = True, **extra: object
) -> None:
    met = value <= target if lower_is_better else value >= target
    print(
        json.dumps(
            {"metric": metric, "value": round(value, 4), "target": target, "met": met, **extra}
        )
    )
