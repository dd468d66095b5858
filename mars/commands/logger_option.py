"""`--logger NAMES`, declared once for `mars train`, `mars train-mas`, `mars loop` and
`mars experiment`: the trackers that get the run's metrics besides metrics.jsonl (a loop: its
learning-curve rows), with its config (core.trackers; docs/training.md, "Trackers").

Nothing heavy is imported here: `mars --help` stays fast, and a tracker's library is imported
only by the run that uses it.
"""

from __future__ import annotations

from typing import Any

import typer

LOGGER_HELP = (
    "Trackers that also get the metrics and the config, comma-separated: console, wandb, "
    "tensorboard, mlflow (none: no tracker). Each writes into the run directory with no network: "
    "RUN/tensorboard/, RUN/wandb/ (offline unless WANDB_MODE is set), RUN/mlruns/ (unless "
    "MLFLOW_TRACKING_URI is set). Default: the config's `logger:`, else none."
)


def logger_option() -> Any:
    """The `--logger` option (a fresh typer.Option for each command that declares it)."""
    return typer.Option(None, "--logger", help=LOGGER_HELP)


LOGGER = logger_option()


def parse_loggers(text: str | None) -> tuple[str, ...] | None:
    """`--logger a,b` -> ("a", "b"); None when the flag is not given (the config decides).

    An unknown name is refused in one line listing the known ones; a tracker whose package is
    not installed in one line naming the extra that installs it (`pip install
    'mars-harness[wandb]'`), before anything runs. `none` (or an empty value) is no tracker.
    """
    if text is None:
        return None
    from core.trackers import check_loggers

    return check_loggers(text.split(","), flag="--logger")
