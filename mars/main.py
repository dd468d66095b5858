"""The `mars` program: the command line's typer app (mars.commands) with every command registered,
and the one place where errors become one line and an exit code.

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
from mars.commands.app import app

_err = Console(stderr=True)


def register_commands() -> None:
    """Import every command module: each adds its commands to `app`."""
    import importlib

    for module in _COMMAND_MODULES:
        importlib.import_module(module)
    _set_short_help(app)


# What `mars --help` lists beside each command: whole phrases (click would cut a docstring's
# first sentence at the terminal's width, mid-sentence).
SHORT_HELP: dict[str, str] = {
    "serve": "Serve a model behind an OpenAI-compatible API.",
    "grade": "Grade one response, or a file of cases.",
    "eval": "Run reasoning suites through a MAS and grade every answer.",
    "report": "Compare eval runs: a metric per suite, 95% intervals.",
    "export": "Write an eval run as Inspect eval logs.",
    "arena": "Play a model or bot against an opponent, both seats.",
    "selfplay": "One model in both seats: per-turn trajectories.",
    "ratings": "Bradley-Terry ratings of the players in arena runs.",
    "exploitability": "Exact exploitability of a poker policy.",
    "train": "Self-play training in games (MARSHAL).",
    "train-mas": "AT-GRPO inside a MAS workflow (Stronger-MAS).",
    "loop": "Evaluate each new checkpoint of a training run.",
    "failures": "Classify failed MAS transcripts into MAST modes.",
    "dashboard": "Browse runs in a Streamlit dashboard.",
    "experiment": "Run a paper's experiment: training, evaluations, report.",
    "demo": "The paper in miniature on CPU (about 12 minutes).",
    "tiny-model": "Build the tiny model, pre-train it, build starts.",
    "tiny-model build": "Build the tiny model (tokenizer, weights).",
    "tiny-model pretrain": "Teach it the game reply format.",
    "tiny-model start": "Build a miniature's start model (MAS, games).",
    "data": "The benchmark test sets: sources, cache, checksums.",
    "data list": "Each suite's source, rows, checksum and location.",
    "data fetch": "Download test sets from the hub into the cache.",
    "data verify": "Check local test sets against recorded checksums.",
}


def _set_short_help(typer_app: typer.Typer, prefix: str = "") -> None:
    for command in typer_app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        command.short_help = command.short_help or SHORT_HELP.get(f"{prefix}{name}")
    for group in typer_app.registered_groups:
        group.short_help = group.short_help or SHORT_HELP.get(f"{prefix}{group.name}")
        if group.typer_instance is not None:
            _set_short_help(group.typer_instance, f"{prefix}{group.name} ")


# The command line's modules, then orchestration's (the commands that run other commands).
_COMMAND_MODULES: tuple[str, ...] = (
    "mars.commands.serve",
    "mars.commands.tiny_model",
    "mars.commands.grade",
    "mars.commands.data",
    "mars.commands.eval",
    "mars.commands.report",
    "mars.commands.export",
    "mars.commands.arena",
    "mars.commands.ratings",
    "mars.commands.exploitability",
    "mars.commands.train",
    "mars.commands.train_mas",
    "mars.orchestration.loop.command",
    "mars.commands.failures",
    "mars.commands.dashboard",
    "mars.orchestration.demo",
    "mars.orchestration.experiments.command",
)


def run() -> None:
    """Console-script entry point: user-facing errors become one line and a non-zero exit."""
    try:
        _run()
    except SystemExit as exc:
        _leave(exc.code)
    except BrokenPipeError:  # `mars ... | head` closed the pipe: stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _leave(128 + signal.SIGPIPE)
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


def _check_environment() -> None:
    """Environment variables that name a folder must name one (a file there would fail deep
    inside whichever command touches it first, with a traceback)."""
    import os

    for variable in ("MARS_CACHE_DIR", "MARS_DATA_DIR"):
        value = os.environ.get(variable)
        if value and os.path.exists(value) and not os.path.isdir(value):
            raise MarsError(f"${variable}={value} is a file, not a folder: point it at a folder")


def _run() -> None:
    import core.lifecycle

    core.lifecycle.COMMAND_LINE = ["mars", *sys.argv[1:]]  # what run.json records
    try:
        _run_command()
    finally:  # a test may call the program in its own process, then the library
        core.lifecycle.COMMAND_LINE = None


def _run_command() -> None:
    import click
    import typer

    # typer >= 0.29 carries its own copy of click: its exceptions are not click's.
    exits = (click.exceptions.Exit, typer.Exit)
    usage_errors = (click.ClickException, getattr(typer, "TyperException", click.ClickException))
    aborts = (KeyboardInterrupt, click.exceptions.Abort, typer.Abort)
    register_commands()
    # SIGTERM unwinds like Ctrl-C, so servers started for the command are stopped on the way out.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        _check_environment()
        # Without standalone mode typer returns the exit code of `typer.Exit` and of Ctrl-C (130).
        code = app(standalone_mode=False)
    except MarsError as exc:
        _fail(str(exc), exc.exit_code)
    except EndpointError as exc:
        _fail(f"model request failed: {exc}", ExitCode.MODEL_FAILED)
    except exits as exc:
        sys.exit(exc.exit_code)
    except usage_errors as exc:  # the parser's own message, on one line, and where help is
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if type(exc).__name__ == "NoArgsIsHelpError":  # `mars`, `mars tiny-model`: the help
            print(message)
            sys.exit(0)
        context = getattr(exc, "ctx", None)
        where = f" (see `{context.command_path} --help`)" if context is not None else ""
        _fail(" ".join(f"{message}{where}".split()), ExitCode.BAD_INPUT)
    except aborts:
        _fail("interrupted", ExitCode.INTERRUPTED)
    if code == ExitCode.INTERRUPTED:
        _fail("interrupted", ExitCode.INTERRUPTED)
    if isinstance(code, int) and code:
        sys.exit(code)


def _raise_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _fail(message: str, code: int) -> None:
    # The message is printed as it is: no markup, no emoji codes (a path may hold `[...]`).
    _err.print("error:", style="red", end=" ")
    _err.print(message, markup=False, emoji=False, highlight=False, soft_wrap=True)
    sys.exit(code)
