"""Which run the Inspector and the Games page open: the one the URL names (`?run=NAME`), else
the run opened last (under this runs root, among the page's runs), else the longest-running
train run, else the newest.

A run picked on either page is written back to the URL (so a reload or a shared link opens it)
and to a small state file: `$MARS_DASHBOARD_STATE`, else `<mars cache>/dashboard/
last-opened.json` (`core.files.mars_cache_dir`, ~/.cache/mars by default). It holds, per runs root,
the names of the runs opened last, newest first. It lives in the cache rather than under the
runs root: the dashboard only reads the runs root, which may be shared or read-only. A state
file that cannot be read or written is ignored; it decides a default, never what a page shows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import streamlit as st

from core.files import mars_cache_dir, write_atomic
from dashboard.data.runs import RunEntry
from dashboard.paths import PathRefused, inside_root

STATE_ENV = "MARS_DASHBOARD_STATE"
PICKED_RUN = "mars_picked_run"  # session state: the run `pick_run` last wrote to the URL
STATE_FILE = Path("dashboard") / "last-opened.json"
KEEP_RUNS = 8  # names remembered per runs root
KEEP_ROOTS = 32  # runs roots remembered


def state_path(env: Mapping[str, str] = os.environ) -> Path:
    chosen = env.get(STATE_ENV)
    return Path(chosen).expanduser() if chosen else mars_cache_dir() / STATE_FILE


def _read_state(path: Path) -> dict[str, list[str]]:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(state, dict):
        return {}
    return {
        str(root): [str(name) for name in names]
        for root, names in state.items()
        if isinstance(names, list)
    }


def recent_runs(root: Path, path: Path | None = None) -> list[str]:
    """The runs opened last under `root`, newest first."""
    return _read_state(path or state_path()).get(str(Path(root).resolve()), [])


def remember(root: Path, name: str, path: Path | None = None) -> None:
    """Put `name` first among `root`'s recent runs (nothing written when it already is)."""
    path = path or state_path()
    state = _read_state(path)
    key = str(Path(root).resolve())
    names = state.get(key, [])
    if names[:1] == [name]:
        return
    state.pop(key, None)
    state[key] = [name, *(n for n in names if n != name)][:KEEP_RUNS]
    kept = dict(list(state.items())[-KEEP_ROOTS:])  # the roots used last stay
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(kept, indent=1))
    except OSError:
        return


def running_seconds(run: RunEntry, now: datetime) -> float:
    """How long a run ran: its start to its end (to `now` while it runs); 0 when unknown."""
    started = _when(run.started_at)
    if started is None:
        return 0.0
    ended = _when(run.ended_at) or now
    return max(0.0, (ended - started).total_seconds())


def _when(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def default_index(
    runs: Sequence[RunEntry], recent: Sequence[str], now: datetime | None = None
) -> int:
    """The run a page opens without `?run=`: the most recent of `recent` among `runs`, else
    the longest-running train run, else the first (the newest)."""
    names = [run.name for run in runs]
    for name in recent:
        if name in names:
            return names.index(name)
    now = now or datetime.now(UTC)
    trains = [i for i, run in enumerate(runs) if run.kind == "train"]
    if not trains:
        return 0
    return max(trains, key=lambda i: (running_seconds(runs[i], now), -i))


def pick_run(label: str, runs: Sequence[RunEntry], root: Path, key: str) -> RunEntry:
    """A select box over `runs` opened at `?run=NAME` (checked against the root), else at
    `default_index`; the run picked goes to the URL and to the state file."""
    names = [run.name for run in runs]
    index = requested_index(root, [run.path for run in runs])
    if index is None:
        index = default_index(runs, recent_runs(root))
    chosen = st.selectbox(label, names, index=index, key=key)
    if st.query_params.get("run") != chosen:
        st.query_params["run"] = chosen
    st.session_state[PICKED_RUN] = chosen
    remember(root, chosen)
    return runs[names.index(chosen)]


def requested_index(
    root: Path, paths: Sequence[Path], param: str = "run", what: str = "run"
) -> int | None:
    """The position among `paths` of the run the URL names (`?run=`, or `param`), checked
    against the root; None when it names none (an error or warning shown when it names one that
    is outside the root or not here)."""
    requested = st.query_params.get(param)
    if not requested:
        return None
    try:
        wanted = inside_root(root, requested)
    except PathRefused as exc:
        st.error(str(exc))
        return None
    for index, path in enumerate(paths):
        if path == wanted:
            return index
    st.warning(f"no such {what} here: {requested}")
    return None


def link(page: str, **query: Any) -> str:
    """A relative link to a page of this app with URL parameters (None values left out); a
    value `#anchor` under the key `anchor` becomes the fragment."""
    from urllib.parse import urlencode

    anchor = query.pop("anchor", None)
    params = {"page": page, **{k: v for k, v in query.items() if v is not None}}
    return f"?{urlencode(params)}" + (f"#{anchor}" if anchor else "")
