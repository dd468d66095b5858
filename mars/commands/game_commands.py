"""What the commands that play games share: help lines, a flag check, a progress ticker."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from core.model_options import ModelOptions

SEATS_HELP = "Seats the player takes: both | first | second."
INVALID_HELP = "Invalid replies: penalty (the game ends, the paper's rule) | retry:K (K re-asks)."
STYLE_HELP = "Prompts: full (rules, one growing chat per seat) | compact (short, for tiny models)."
PLAYER_HELP = (
    "llm (--model), llm:PATH (a checkpoint served for the run), llm:NAME@URL (a model at a URL), "
    "random, mcts:SIMS, cfr:ITERS, nash."
)
LABEL_HELP = (
    "Who --model is in records and ratings (default: its folder's absolute path, or the name "
    "given with --base-url)."
)


def check_model_flags(wanted: bool, model_options: ModelOptions) -> ModelOptions:
    """Fail before any run directory or server exists. With --base-url and no --model, the
    model name is the one the server serves (asked now: records and ratings are keyed by it)."""
    if wanted and model_options.base_url and not model_options.model:
        from core.model_access import checked_replicas, served_model_name

        urls = checked_replicas(model_options.base_url)
        return dataclasses.replace(model_options, model=served_model_name(urls[0]))
    return model_options


@contextlib.contextmanager
def progress_ticker(
    total: int, quiet: bool, label: str
) -> Iterator[Callable[[dict[str, Any]], None]]:
    if quiet or total == 0:
        yield lambda _record: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda _record: progress.advance(task)
