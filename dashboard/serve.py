"""`python -m dashboard.serve run APP [streamlit options] -- --runs DIR`: streamlit's own command
line, with the first page's libraries imported while the server starts.

Streamlit imports a page's modules when the first browser asks for it, so the first page waited
on pandas, Altair and its view after the user's request. Here a background thread imports what
the first page (Runs) needs as soon as streamlit itself is loaded, while the server is coming up
and the browser is opening, and draws its chart once (Altair's validators); the first script run
finds it ready. Only the first page's: the other pages are imported after the first page is drawn
(`dashboard.app.warm_pages`), so on two busy cores they do not compete with it. The thread starts
after `import streamlit` on the main thread, so the two never import the same module at the same
time (that path is the one where Python's per-module import locks can deadlock).

Streamlit's runtime also scans every installed distribution's metadata for custom components
when it starts (about 0.4-0.7 s over this project's 200 packages, before the server answers);
the dashboard uses none, so the scan is skipped (`skip_component_scan`).
"""

from __future__ import annotations

import importlib
import socket
import sys
import threading
import time

from dashboard.launch import ADDRESS

FIRST_PAGE_MODULES = (
    "pandas",
    "altair",
    "dashboard.data",
    "dashboard.cache",
    "dashboard.views.runs",
)


def _warm(port: int | None) -> None:
    if port is not None:
        _wait_until_listening(port)
    try:
        for name in FIRST_PAGE_MODULES:
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


def _wait_until_listening(port: int, timeout_s: float = 30.0) -> None:
    """Return once the server accepts connections on `port` (or after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ADDRESS, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.01)


def server_port(argv: list[str]) -> int | None:
    """The `--server.port N` (or `--server.port=N`) of streamlit's command line."""
    for index, word in enumerate(argv):
        if word == "--server.port" and index + 1 < len(argv):
            value = argv[index + 1]
        elif word.startswith("--server.port="):
            value = word.split("=", 1)[1]
        else:
            continue
        return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def skip_component_scan() -> None:
    """No search for custom components (the dashboard has none) when the runtime starts."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a streamlit without it does not scan either
        return
    manifest_scanner.scan_component_manifests = lambda *_, **__: []


def main() -> None:
    from streamlit.web import cli

    skip_component_scan()
    port = server_port(sys.argv[1:])
    threading.Thread(target=_warm, args=(port,), name="mars-dashboard-warm", daemon=True).start()
    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
