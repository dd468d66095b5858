"""What the use cases that play games share (`mars.arena`, `mars.selfplay`,
`mars.exploitability`): the model-flag check, a progress ticker, an endpoint's usage."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from core.model_options import ModelOptions


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


async def close_endpoint(endpoint: Any) -> dict[str, Any]:
    """Close `endpoint`; its usage (per role and in all), as summary.json's `usage` holds it."""
    usage = {"by_role": endpoint.ledger.by_role(), "totals": endpoint.ledger.totals()}
    await endpoint.aclose()
    return usage
