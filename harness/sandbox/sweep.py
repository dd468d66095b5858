"""Killing every process of a run's uid (as root each run has a uid of its own)."""

from __future__ import annotations

import contextlib
import os
import signal

SWEEP_ROUNDS = 100


def status_fields(pid: str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in lines if ":" in line)


def user_processes(uid: int) -> list[int]:
    """Live (not zombie) processes whose real, effective or saved uid is `uid`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = status_fields(name)
        if not fields or fields.get("State", "").strip().startswith("Z"):
            continue
        if str(uid) in fields.get("Uid", "").split()[:3]:
            found.append(int(name))
    return found


def kill_user_processes(uid: int) -> None:
    """SIGKILL every process of the sandbox's uid until none is left (a fork racing the scan is
    caught on the next round; RLIMIT_NPROC keeps the rounds few)."""
    for _ in range(SWEEP_ROUNDS):
        pids = user_processes(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
