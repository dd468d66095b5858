"""The mars dashboard: `mars dashboard --runs DIR`.

Or directly: `streamlit run dashboard/app.py -- --runs DIR`.

It reads run directories under one root and nothing else (see dashboard/paths.py). Pages are
chosen in the sidebar, or with `?page=samples` in the URL; `?run=NAME` preselects a run
(`?a=NAME&b=NAME` the two runs of the Compare page).

Only the page shown is imported: the first page of a fresh server waits for its own libraries
and no other's. Once a page is drawn, a background thread imports the other pages (`warm_pages`), so
the next click finds them loaded.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import dashboard  # noqa: F401
except ImportError:  # `streamlit run dashboard/app.py` from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from dashboard import defaults
from dashboard.paths import runs_root

# Page name -> its module in dashboard/views.
PAGES = {
    "Runs": "runs",
    "Samples": "samples",
    "Compare": "compare",
    "Failure modes": "failures",
    "Games": "games",
    "Training": "training",
    "Inspector": "inspector",
    "Experiments": "experiments",
}
_SLUGS = {name.lower().replace(" ", "-"): name for name in PAGES}
SHOWN_PAGE = "mars_shown_page"  # session state: the page the last script run drew
# URL parameters of one page (a step, a state, an episode, a turn), dropped on leaving it.
PAGE_PARAMS = ("step", "state", "seed", "seat_turn", "turn", "policy_state")


def slug_of(page: str) -> str:
    return page.lower().replace(" ", "-")


def page_renderer(page: str) -> Callable[..., Any]:
    return importlib.import_module(f"dashboard.views.{PAGES[page]}").render


@st.cache_resource(show_spinner=False)
def warm_pages() -> threading.Thread:
    """Import every page in a background thread, once per server process (a cached resource
    outlives the script runs, which start this file afresh each time)."""

    def run() -> None:
        for page in PAGES:
            try:
                page_renderer(page)
            except Exception:  # the page's own run reports any real problem, in the page
                continue

    thread = threading.Thread(target=run, name="mars-dashboard-pages", daemon=True)
    thread.start()
    return thread


def _pick_page() -> str:
    requested = _SLUGS.get(str(st.query_params.get("page", "")).lower())
    names = list(PAGES)
    page = st.sidebar.radio(
        "page", names, index=names.index(requested) if requested else 0, key="page"
    )
    shown = st.session_state.get(SHOWN_PAGE)
    st.session_state[SHOWN_PAGE] = page
    if shown is not None and shown != page:
        _leave_page()
    if page != requested:
        st.query_params["page"] = slug_of(page)
    return page


def _leave_page() -> None:
    """Another page was clicked: the last page's own parameters go, so they are not read as
    this page's; so does the run it picked (a run the URL named stays for the next page)."""
    for name in PAGE_PARAMS:
        if name in st.query_params:
            del st.query_params[name]
    picked = st.session_state.get(defaults.PICKED_RUN)
    if picked is not None and st.query_params.get("run") == picked:
        del st.query_params["run"]


def _sidebar(root: Path) -> list[Any]:
    from dashboard import cache

    scan = cache.scan(root)
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
    return found


def main() -> None:
    st.set_page_config(page_title="mars dashboard", layout="wide")
    root = runs_root(sys.argv[1:])
    st.sidebar.title("mars")
    page = _pick_page()
    found = _sidebar(root)
    page_renderer(page)(root, found)
    warm_pages()


main()
