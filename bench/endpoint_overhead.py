"""Endpoint overhead: 1,000 requests at concurrency 32 against a server that answers after 100 ms.

Prints wall time over the ideal (1,000 x 0.1 s / 32) and the CPU milliseconds per request spent in
this (client) process. Target: ratio <= 1.2 and <= 3 ms of CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DRY_RUN_URL,
    DryRun,
    add_dry_run,
    report,
    run_dry,
    scripted_server_command,
    scripted_server_process,
)

from core.endpoint import Endpoint, EndpointConfig

REQUESTS = 1000
CONCURRENCY = 32
DELAY_S = 0.1


async def run(base_url: str) -> tuple[float, float, int]:
    endpoint = Endpoint(endpoint_config(base_url))
    # Warm the connection pool so start-up costs are not billed to the measured requests.
    await asyncio.gather(
        *(endpoint.complete([{"role": "user", "content": f"warm {i}"}]) for i in range(CONCURRENCY))
    )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = await asyncio.gather(
        *(
            endpoint.complete([{"role": "user", "content": f"question {i}"}])
            for i in range(REQUESTS)
        )
    )
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await endpoint.aclose()
    return wall, cpu, sum(r.retries for r in results)


def endpoint_config(base_url: str) -> EndpointConfig:
    return EndpointConfig(base_url=base_url, model="scripted", concurrency=CONCURRENCY)


def dry_run(dry: DryRun) -> None:
    """The scripted server's command line and the client's endpoint config."""
    dry.module(scripted_server_command(DELAY_S))
    dry.config(lambda: endpoint_config(DRY_RUN_URL), "endpoint config")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dry_run(parser)
    if parser.parse_args().dry_run:
        run_dry(dry_run)
        return
    with scripted_server_process(DELAY_S) as base_url:
        wall, cpu, retries = asyncio.run(run(base_url))
    ideal = REQUESTS * DELAY_S / CONCURRENCY
    cpu_ms = cpu * 1000 / REQUESTS
    print(
        f"wall {wall:.2f}s, ideal {ideal:.2f}s, "
        f"client CPU {cpu_ms:.2f} ms/request, retries {retries}"
    )
    report(
        "wall_over_ideal",
        wall / ideal,
        1.2,
        cpu_ms_per_request=round(cpu_ms, 3),
        cpu_target_ms=3.0,
        cpu_met=cpu_ms <= 3.0,
        requests=REQUESTS,
        concurrency=CONCURRENCY,
    )


if __name__ == "__main__":
    main()
