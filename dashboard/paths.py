"""The runs root, and the rule that nothing outside it is ever read.

Every path the dashboard opens is built from the root (run directories found under it, or a name
from the URL) and checked with `inside_root` after resolving symlinks and `..`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from core.errors import MarsError

RUNS_ROOT_ENV = "MARS_RUNS_ROOT"


class PathRefused(MarsError):
    """A path that resolves outside the runs root."""


def runs_root(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> Path:
    """The root from `MARS_RUNS_ROOT`, else `--runs DIR` after streamlit's `--`, else ./runs."""
    if env.get(RUNS_ROOT_ENV):
        return Path(env[RUNS_ROOT_ENV]).expanduser().resolve()
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--runs", default=None)
    known, _ = parser.parse_known_args(list(argv))
    return Path(known.runs or "runs").expanduser().resolve()


def inside_root(root: Path, candidate: str | Path) -> Path:
    """`candidate` (absolute, or relative to `root`) resolved; refused unless under the root."""
    root = Path(root).resolve()
    text = str(candidate)
    if "\x00" in text:
        raise PathRefused("refused: the path contains a NUL byte")
    path = Path(text)
    resolved = (path if path.is_absolute() else root / path).resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise PathRefused(f"refused: {text} is outside the runs root {root}")
    return resolved


def relative_name(root: Path, path: Path) -> str:
    """How a run is named in the app: its path relative to the root."""
    return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
