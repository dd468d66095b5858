"""How the dashboard starts: streamlit's `run` over dashboard/app.py, headless, on 127.0.0.1.
`mars dashboard` runs this command (with its own port check and signal handling); the browser
tests and the screenshots may run it directly."""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

from core.errors import MarsError

ADDRESS = "127.0.0.1"


def app_path() -> Path:
    """dashboard/app.py, located without importing the dashboard package into the CLI."""
    spec = find_spec("dashboard")
    if spec is None or not spec.submodule_search_locations:
        raise MarsError("the dashboard package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "app.py"
    if not path.is_file():
        raise MarsError(f"{path} is missing")
    return path


def streamlit_command(root: Path, port: int) -> list[str]:
    """streamlit's `run` through dashboard.serve, which imports the first page's libraries as
    soon as the server listens (so the first page does not wait for them)."""
    return [
        sys.executable,
        "-m",
        "dashboard.serve",
        "run",
        str(app_path()),
        "--server.headless",
        "true",
        "--server.address",
        ADDRESS,
        "--server.port",
        str(port),
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--",
        "--runs",
        str(root),
    ]
