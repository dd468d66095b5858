"""Cached loaders: every file is parsed once per content version, keyed on (path, mtime, size).

A rewritten or appended file changes its stamp, so the next rerun reads it again; an unchanged one
is served from memory. Parsed records and the tables built from them are held with
`st.cache_resource` (shared, never copied): `st.cache_data` would pickle and unpickle 10,000
transcripts on every widget interaction, which costs more than the first parse. Callers treat the
returned objects as read-only. Every path is checked against the runs root before it is opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core import branch_log
from dashboard import data, mas_data
from dashboard.data import branches as inspected
from dashboard.data.runs import MAX_DEPTH, SKIPPED_DIRS
from dashboard.paths import inside_root

_ENTRIES = 64
_STEPS = 4096  # step digests kept: every step of a long run, each a few kB


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _jsonl(path: str, mtime_ns: int, size: int) -> data.JsonlData:
    return data.read_jsonl(Path(path))


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _eval_frame(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    return data.eval_frame(_jsonl(path, mtime_ns, size).rows)


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _record_index(path: str, mtime_ns: int, size: int) -> dict[tuple[str, str, int], int]:
    rows = _jsonl(path, mtime_ns, size).rows
    return {data.key_of(r): i for i, r in enumerate(rows)}


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _workflow(path: str, mtime_ns: int, size: int) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    records = mas_data.workflow_records(_jsonl(path, mtime_ns, size).rows)
    return records, mas_data.workflow_table(records)


@st.cache_data(show_spinner=False, max_entries=_ENTRIES)
def _line_count(path: str, mtime_ns: int, size: int) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _metrics(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    return data.metrics_frame(_jsonl(path, mtime_ns, size).rows)


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _curve(path: str, mtime_ns: int, size: int) -> data.JsonlData:
    return data.learning_curve(Path(path))


@st.cache_resource(show_spinner=False, max_entries=_ENTRIES)
def _branches(path: str, mtime_ns: int, size: int) -> list[dict[str, Any]]:
    return branch_log.read_file(Path(path))


@st.cache_resource(show_spinner=False, max_entries=_STEPS)
def _digest(path: str, mtime_ns: int, size: int) -> inspected.StepDigest:
    return inspected.step_digest(_branches(path, mtime_ns, size))


@st.cache_resource(show_spinner=False, max_entries=8)
def _scan(root: str, folders: tuple[tuple[str, int], ...]) -> data.RunScan:
    return data.scan_runs(Path(root))


def folder_stamps(root: Path) -> tuple[tuple[str, int], ...]:
    """(folder, mtime in ns) of the root and of every folder `data.runs.run_dirs` looks at: a
    run added, removed or rewritten (run.json is replaced in one rename) changes one of them.
    A symlinked folder is stamped (its target's time) but, as there, not walked into."""
    stamps: list[tuple[str, int]] = []
    level = [str(root)]
    for depth in range(MAX_DEPTH + 1):
        below: list[str] = []
        for folder in level:
            try:
                stamps.append((folder, os.stat(folder).st_mtime_ns))
                entries = list(os.scandir(folder)) if depth < MAX_DEPTH else []
            except OSError:
                continue
            for entry in entries:
                if not _looked_at(entry):
                    continue
                if entry.is_symlink():
                    stamps += _stamp_of(entry.path)
                else:
                    below.append(entry.path)
        level = below
    return tuple(sorted(stamps))


def _looked_at(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith(".") or entry.name in SKIPPED_DIRS:
        return False
    try:
        return entry.is_dir()
    except OSError:
        return False


def _stamp_of(folder: str) -> list[tuple[str, int]]:
    try:
        return [(folder, os.stat(folder).st_mtime_ns)]
    except OSError:
        return []


def scan(root: Path) -> data.RunScan:
    """`data.scan_runs(root)`, read again only when a folder it walks has changed."""
    root = Path(root).resolve()
    return _scan(str(root), folder_stamps(root))


def _stamp(root: Path, path: Path) -> tuple[str, int, int] | None:
    return data.file_stamp(inside_root(root, path))


def jsonl(root: Path, path: Path) -> data.JsonlData:
    stamp = _stamp(root, path)
    return _jsonl(*stamp) if stamp else data.JsonlData()


def eval_data(root: Path, path: Path) -> tuple[data.JsonlData, pd.DataFrame]:
    """The records and their table, from one and the same version of the file."""
    stamp = _stamp(root, path)
    if stamp is None:
        return data.JsonlData(), data.eval_frame([])
    return _jsonl(*stamp), _eval_frame(*stamp)


def record_lookup(
    root: Path, path: Path
) -> tuple[list[dict[str, Any]], dict[tuple[str, str, int], int]]:
    """The records and a (suite, sample id, epoch) -> position map, from one file version."""
    stamp = _stamp(root, path)
    if stamp is None:
        return [], {}
    return _jsonl(*stamp).rows, _record_index(*stamp)


def workflow_data(root: Path, path: Path) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """A MAS training run's workflow records and their table, from one file version."""
    stamp = _stamp(root, path)
    if stamp is None:
        return [], mas_data.workflow_table([])
    return _workflow(*stamp)


def line_count(root: Path, path: Path) -> int:
    stamp = _stamp(root, path)
    return _line_count(*stamp) if stamp else 0


def metrics(root: Path, path: Path) -> pd.DataFrame:
    stamp = _stamp(root, path)
    return _metrics(*stamp) if stamp else pd.DataFrame()


def curve(root: Path, path: Path) -> data.JsonlData:
    stamp = _stamp(root, path)
    return _curve(*stamp) if stamp else data.JsonlData()


def branches(root: Path, run_path: Path, step: int) -> list[dict[str, Any]]:
    """A training step's branch lines (core.branch_log), read once per file version."""
    stamp = _stamp(root, branch_log.step_path(run_path, step))
    return _branches(*stamp) if stamp else []


def step_digests(root: Path, run_path: Path) -> dict[int, inspected.StepDigest]:
    """Every logged step's digest (its collapse signals, its states), each step file read once
    per version."""
    digests = {}
    for step in branch_log.logged_steps(run_path):
        stamp = _stamp(root, branch_log.step_path(run_path, step))
        if stamp is not None:
            digests[step] = _digest(*stamp)
    return digests


def summary(root: Path, run_path: Path) -> dict[str, Any] | None:
    return data.summary_of(inside_root(root, run_path))


def usage(root: Path, run_path: Path) -> dict[str, Any] | None:
    """An eval run's usage.json (small: read on every rerun, like summary.json)."""
    return data.read_json(inside_root(root, run_path / data.USAGE_FILE))
