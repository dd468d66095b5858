"""Shared fixtures: run the real `mars` CLI in a subprocess, find the shared benchmark data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data" / "benchmarks"


def mars_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def run_mars(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or mars_env(),
        cwd=REPO,
        check=False,
    )


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
