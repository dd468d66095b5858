"""The mars dashboard: `mars dashboard --runs DIR`.

Or directly: `streamlit run dashboard/app.py -- --runs DIR`.

It reads run directories under one root and nothing else (see dashboard/paths.py). Pages are
chosen in the sidebar, or with `?page=samples` in the URL; `?run=NAME` preselects a run
(`?a=NAME&b=NAME` the two runs of the Compare page).
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import dashboard  # noqa: F401
except ImportError:  # `streamlit run dashboard/app.py` from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from dashboard.data import scan_runs
from dashboard.paths import runs_root
from dashboard.views import (
    compare,
    experiments,
    failures,
    games,
    inspector,
    runs,
    samples,
    training,
)

PAGES = {
    "Runs": runs.render,
    "Samples": samples.render,
    "Compare": compare.render,
    "Failure modes": failures.render,
    "Games": games.render,
    "Training": training.render,
    "Inspector": inspector.render,
    "Experiments": experiments.render,
}
_SLUGS = {name.lower().replace(" ", "-"): name for name in PAGES}


def main() -> None:
    st.set_page_config(page_title="mars dashboard", layout="wide")
    root = runs_root(sys.argv[1:])
    requested = _SLUGS.get(str(st.query_params.get("page", "")).lower())
    names = list(PAGES)
    st.sidebar.title("mars")
    page = st.sidebar.radio(
        "page", names, index=names.index(requested) if requested else 0, key="page"
    )
    scan = scan_runs(root)
    found = scan.entries
    st.sidebar.caption(f"{len(found)} run{'' if len(found) == 1 else 's'} under `{root}`")
    if scan.unreadable:
        count = len(scan.unreadable)
        st.sidebar.warning(f"{count} run director{'y' if count == 1 else 'ies'} could not be read")
        with st.sidebar.expander("unreadable run directories"):
            for name, why in scan.unreadable:
                st.markdown(f"- `{name}`: {why}")
    if not root.is_dir():
        st.sidebar.warning(f"{root} does not exist yet")
    PAGES[page](root, found)


main()
