"""Check a `mars ...` command line with the real parsers, without running the command.

The docs' examples, the `--help` examples and the bench scripts' dry runs go through this: an
option that does not exist, a missing required one, or a value a parser refuses is an error.
What a command checks only once it runs (a model folder that exists, a server that answers) is
not checked here.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from typing import Any

from core.errors import MarsError


@functools.cache
def mars_group() -> Any:
    """The `mars` command as typer builds it, every command registered."""
    import typer

    from mars.main import app, register_commands

    register_commands()
    return typer.main.get_command(app)


def check_command_line(argv: Sequence[str] | str, *, complete: bool = True) -> list[str]:
    """Parse `argv` (the words after `mars`, or a whole line starting with `mars`) as the
    command would; MarsError with the parser's own message if it refuses. Returns the command's
    path, e.g. ["tiny-model", "pretrain"].

    `complete=False` is for a fragment (`mars eval --mas NAME` in a sentence): the command and
    every option named must exist; required options may be missing and values may be
    placeholders. A line asking for `--help` is a fragment too.
    """
    from typer._click import exceptions as click_errors

    words = shlex.split(argv) if isinstance(argv, str) else list(argv)
    if words and words[0] == "mars":
        words = words[1:]
    fragment = not complete or "--help" in words
    words = [word for word in words if word != "--help"]
    extra = {"resilient_parsing": True} if fragment else {}
    command = mars_group()
    path: list[str] = []
    try:
        context = command.make_context("mars", list(words), **extra)
        while hasattr(command, "resolve_command"):  # a group: descend into the named command
            remaining = context._protected_args + context.args
            if not remaining:  # `mars --help`, `mars tiny-model --help`
                break
            name, command, rest = command.resolve_command(context, remaining)
            if command is None:  # resilient parsing says nothing of an unknown command
                raise MarsError(f"`mars {shlex.join(words)}`: no such command {remaining[0]!r}")
            path.append(name)
            context = command.make_context(name, list(rest), parent=context, **extra)
            if fragment and not hasattr(command, "resolve_command"):
                # resilient parsing lets unknown options pass: look at each name
                _check_option_names(command, rest, words)
    except click_errors.ClickException as exc:
        raise MarsError(f"`mars {shlex.join(words)}`: {exc.format_message()}") from None
    return path


def _check_option_names(command: Any, args: Sequence[str], words: Sequence[str]) -> None:
    known = {"--help"}
    for param in command.params:
        known.update(getattr(param, "opts", ()), getattr(param, "secondary_opts", ()))
    for arg in args:
        name = arg.split("=", 1)[0]
        number = name.lstrip("-").replace(".", "").isdigit()  # -1 is a value, not an option
        if name.startswith("-") and not number and name not in known:
            raise MarsError(f"`mars {shlex.join(words)}`: no such option: {name}")
