"""The `mars` command line's typer app. Each command module adds its commands to it when
imported; `mars.main` imports them all (`register_commands`)."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="mars",
    help="Evaluate and train multi-agent LLM reasoning (MARSHAL-style self-play).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help as written: rich's markup would turn `:100:` into an emoji and `[...]` into styles.
    rich_markup_mode=None,
)
