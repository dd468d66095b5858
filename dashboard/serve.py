"""`python -m dashboard.serve run APP [streamlit options] -- --runs DIR`: streamlit's own command
line, with the app's libraries imported while the server starts.

Streamlit imports a page's modules when the first browser asks for it, so the first page waited
on pandas, Altair and every view (about two seconds here) after the user's request. Here a
background thread imports them as soon as streamlit itself is loaded, while the server is coming
up and the browser is opening, and draws the first page's chart once (Altair's validators); the
first script run finds all of it ready. The thread
starts after `import streamlit` on the main thread, so the two never import the same module at
the same time (that path is the one where Python's per-module import locks can deadlock).
"""

from __future__ import annotations

import importlib
import sys
import threading

WARM_MODULES = (
    "pandas",
    "altair",
    "dashboard.data",
    "dashboard.cache",
    "dashboard.views.runs",
    "dashboard.views.samples",
    "dashboard.views.compare",
    "dashboard.views.failures",
    "dashboard.views.games",
    "dashboard.views.training",
    "dashboard.views.inspector",
    "dashboard.views.experiments",
)


def _warm() -> None:
    try:
        for name in WARM_MODULES:
            importlib.import_module(name)
        _warm_charts()
    except Exception:  # the page's own run reports any real problem, in the page
        return


def _warm_charts() -> None:
    """Altair builds and caches its schema validators on a chart's first use (about half a
    second): draw the first page's chart once, on a one-row table."""
    import pandas as pd

    from dashboard.views.runs import accuracy_chart

    row = {"suite": "s", "mas": "m", "model": "x", "run": "r", "n": 1, "accuracy": 1.0}
    accuracy_chart(pd.DataFrame([{**row, "ci_low": 0.5, "ci_high": 1.0}])).to_dict()


def main() -> None:
    from streamlit.web import cli

    threading.Thread(target=_warm, name="mars-dashboard-warm", daemon=True).start()
    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
