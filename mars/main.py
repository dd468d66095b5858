"""The `mars` command line: one typer app; each command group lives in its own module.

Command modules import their heavy dependencies (torch, OpenSpiel, ...) inside the command
function so that `mars --help` and `mars grade` start fast.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import NoReturn

import typer
from rich.console import Console

from core.errors import EndpointError, ExitCode, MarsError

app = typer.Typer(
    name="mars",
    help="Evaluate and train multi-agent LLM reasoning (MARSHAL-style self-play).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_err = Console(stderr=True)


def _register_commands() -> None:
    # Each module adds its commands to `app` when imported.
    import importlib

    for module in _COMMAND_MODULES:
        importlib.import_module(f"mars.{module}")


_COMMAND_MODULES: tuple[str, ...] = (
    "serve",
    "tiny_model",
    "grade",
    "eval",
    "report",
    "export",
    "arena",
    "ratings",
    "exploitability",
    "train",
    "train_mas",
    "loop",
    "failures",
    "dashboard",
    "demo",
)


def run() -> None:
    """Console-script entry point: user-facing errors become one line and a non-zero exit."""
    try:
        _run()
    except SystemExit as exc:
        _leave(exc.code)
    _leave(0)


def _leave(code: object) -> NoReturn:
    """Exit with `code` without the interpreter's teardown of every module (a few hundred ms
    after a run, with nothing left to do): non-daemon threads are joined, atexit handlers run
    (grading workers, logging, multiprocessing) and stdio is flushed first. Every file the run
    store writes is flushed or closed by then. Under a profiler or tracer the usual exit runs,
    so the tool can write its report."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _run() -> None:
    import click
    import typer

    # typer >= 0.29 carries its own copy of click: its exceptions are not click's.
    exits = (click.exceptions.Exit, typer.Exit)
    usage_errors = (click.ClickException, getattr(typer, "TyperException", click.ClickException))
    aborts = (KeyboardInterrupt, click.exceptions.Abort, typer.Abort)
    _register_commands()
    # SIGTERM unwinds like Ctrl-C, so servers started for the command are stopped on the way out.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        # Without standalone mode typer returns the exit code of `typer.Exit` and of Ctrl-C (130).
        code = app(standalone_mode=False)
    except MarsError as exc:
        _fail(str(exc), exc.exit_code)
    except EndpointError as exc:
        _fail(f"model request failed: {exc}", ExitCode.MODEL_FAILED)
    except exits as exc:
        sys.exit(exc.exit_code)
    except usage_errors as exc:  # usage errors: typer's own one-line message
        if hasattr(exc, "show"):
            exc.show()
        else:
            print(f"Error: {exc}", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)
    except aborts:
        _fail("interrupted", ExitCode.INTERRUPTED)
    if code == ExitCode.INTERRUPTED:
        _fail("interrupted", ExitCode.INTERRUPTED)
    if isinstance(code, int) and code:
        sys.exit(code)


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _fail(message: str, code: int) -> None:
    _err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)
