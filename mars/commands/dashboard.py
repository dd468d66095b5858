"""`mars dashboard`: serve the Streamlit app over a runs root, headless, on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import typer

from core.errors import MarsError
from dashboard.launch import ADDRESS, streamlit_command
from mars.commands.app import app

STOP_GRACE_S = 1.5


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((ADDRESS, 0))
        return int(probe.getsockname()[1])


def check_port(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((ADDRESS, port))
        except OSError as exc:
            raise MarsError(
                f"port {port} on {ADDRESS} is in use; pick another with --port"
            ) from exc


@app.command("dashboard")
def dashboard_command(
    runs: Path = typer.Option(Path("runs"), "--runs", help="Root folder of the run directories."),
    port: int = typer.Option(8501, "--port", min=0, max=65535, help="Port (0: any free one)."),
) -> None:
    """Browse runs: scores, transcripts, failure modes, game replays, training curves."""
    root = runs.expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise MarsError(f"--runs {runs} is not a directory")
    if port == 0:
        port = free_port()
    else:
        check_port(port)
    if not root.exists():
        print(f"note: {root} does not exist yet; the pages will say which command fills it")
    env = {**os.environ, "MARS_RUNS_ROOT": str(root)}
    print(f"mars dashboard: http://{ADDRESS}:{port}  (runs root {root}; Ctrl-C to stop)")
    # Its own process group, so that stopping it stops whatever it started too.
    process = subprocess.Popen(streamlit_command(root, port), env=env, start_new_session=True)

    def stop_child(*_: object) -> None:
        # Streamlit answers SIGTERM with "Stopping..." and then waits on its own threads for
        # ten seconds or more; it keeps nothing that needs flushing, so it gets STOP_GRACE_S.
        # Reaped with waitpid, not Popen.wait: this runs in a signal handler that may have
        # interrupted Popen.wait, which holds the lock another Popen.wait would wait for.
        for signal_number in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, signal_number)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(process.pid, os.WNOHANG)[0]:
                        return
                except ChildProcessError:
                    return
                time.sleep(0.05)

    # A SIGTERM to `mars dashboard` must not leave the streamlit server running.
    previous = signal.signal(signal.SIGTERM, lambda *_: (stop_child(), sys.exit(143)))
    try:
        code = process.wait()
    except KeyboardInterrupt:
        stop_child()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code != 0:
        raise MarsError(f"streamlit exited with code {code}")
