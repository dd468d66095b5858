"""MAS concurrency: 200 GSM8K samples through `mad` and `debate` at concurrency 64.

A scripted server in its own process answers every request after 100 ms (always the same text, so
the MAD moderator never decides and every sample runs 3 rounds plus the judge: 10 calls in a
chain; debate runs 3 agents x 3 generations: 9 calls, 3 in a chain). Samples go through the step
`mars eval` times (`mars.api.eval_steps.solve_items`: the eval runner with 2 x concurrency
workers, its own endpoint, rule grading) into a throwaway run directory, graded and recorded; the
wall time is that step's, as an eval run's `wall_s` is.

For each MAS it prints wall time over the ideal, where
ideal = max(total calls x 0.1 s / concurrency, calls on one sample's longest chain x 0.1 s).
Each MAS runs `--repeat` times (default 3, alternating) and its median ratio counts, since other
work on a 2-core machine moves single runs by tens of percent. Target: <= 1.3 for both; the JSON
line's value is the worse median.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DRY_RUN_URL,
    DryRun,
    add_dry_run,
    report,
    run_dry,
    scripted_server_command,
    scripted_server_process,
    suite,
)

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from core.runstore import RunDir
from harness.benchmarks import get_suite
from harness.evaluation import WorkItem
from harness.graders import GradingPlan
from mars.api.eval_steps import EvalWork, solve_items
from mas.base import Transcript, check_options, check_task_kinds, get_mas

DELAY_S = 0.1
TARGET = 1.3


def mad_chain(transcript: Transcript) -> int:
    return transcript.llm_calls  # every MAD call waits for the one before


def debate_chain(transcript: Transcript) -> int:
    return transcript.rounds + 1 + int(transcript.stop_reason.startswith("aggregat"))


SYSTEMS: dict[str, tuple[dict[str, Any], Callable[[Transcript], int]]] = {
    "mad": ({"rounds": 3, "force_rounds": True}, mad_chain),
    "debate": ({"agents": 3, "rounds": 2}, debate_chain),
}


GENERATION = GenerationConfig(max_tokens=256)


def endpoint_config(base_url: str, concurrency: int) -> EndpointConfig:
    return EndpointConfig(
        base_url=base_url, model="scripted", concurrency=concurrency, max_retries=0
    )


async def warm_up(base_url: str, concurrency: int) -> None:
    """A round of requests first, so the scripted server's own start-up is not billed."""
    endpoint = Endpoint(endpoint_config(base_url, concurrency))
    await asyncio.gather(
        *(endpoint.complete([{"role": "user", "content": f"warm {i}"}]) for i in range(concurrency))
    )
    await endpoint.aclose()


async def measure(
    name: str, base_url: str, items: list[WorkItem], concurrency: int
) -> dict[str, float]:
    config, chain_of = SYSTEMS[name]
    work = EvalWork(
        mas_function=get_mas(name),
        mas_config=config,
        endpoint_config=endpoint_config(base_url, concurrency),
        role_configs={},
        gen=GENERATION,
        gen_by_role={},
        grading=GradingPlan(),  # the suite's rules, as `mars eval` grades by default
        quiet=True,
    )
    await warm_up(base_url, concurrency)
    with tempfile.TemporaryDirectory() as folder:
        run = RunDir.resolve(out=Path(folder), run_dir=None, kind="eval", slug=f"bench-{name}")
        started, cpu_started = time.perf_counter(), time.process_time()
        await solve_items(items, work, run)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        records = run.records()
    errors = sum(bool(record.get("error")) for record in records)
    transcripts = [
        Transcript.model_validate(record["transcript"])
        for record in records
        if record.get("transcript")
    ]
    calls = sum(t.llm_calls for t in transcripts)
    chain = max(chain_of(t) for t in transcripts)
    ideal = max(calls * DELAY_S / concurrency, chain * DELAY_S)
    result = {
        "samples": len(records),
        "errors": errors,
        "calls": calls,
        "chain": chain,
        "wall_s": wall,
        "ideal_s": ideal,
        "ratio": wall / ideal,
        "cpu_ms_per_call": cpu * 1000 / calls,
    }
    print(
        f"{name:>6}: {len(records)} samples, {calls} calls, longest chain {chain} calls, "
        f"errors {errors}; wall {wall:.2f}s, ideal {ideal:.2f}s, ratio {wall / ideal:.3f}, "
        f"client CPU {result['cpu_ms_per_call']:.2f} ms/call"
    )
    return result


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """Each MAS's options through its own probe and its task kinds against GSM8K's, the suite,
    the scripted server's command line, the endpoint config."""
    gsm8k = suite(dry, "gsm8k")
    for name, (config, _) in SYSTEMS.items():
        asyncio.run(check_options(get_mas(name), config, name=name))
        check_task_kinds(name, {gsm8k.name: gsm8k.kind})
        dry.count("MAS config")
    dry.module(scripted_server_command(DELAY_S))
    dry.config(lambda: endpoint_config(DRY_RUN_URL, args.concurrency), "endpoint config")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3, help="runs per MAS; the median counts")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    workers = 2 * args.concurrency  # the eval runner's, as `mars eval` sets it
    gsm8k = get_suite("gsm8k")
    items = [
        WorkItem(suite=gsm8k, sample=s, epoch=0) for s in gsm8k.load(limit=args.samples).samples
    ]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SYSTEMS}
    with scripted_server_process(DELAY_S) as base_url:
        for _ in range(max(1, args.repeat)):
            for name in SYSTEMS:
                runs[name].append(asyncio.run(measure(name, base_url, items, args.concurrency)))
    results = {
        name: {
            "ratio": statistics.median(r["ratio"] for r in measured),
            "cpu_ms_per_call": statistics.median(r["cpu_ms_per_call"] for r in measured),
            "calls": measured[0]["calls"],
            "errors": sum(r["errors"] for r in measured),
        }
        for name, measured in runs.items()
    }
    worst = max(result["ratio"] for result in results.values())
    report(
        "mas_wall_over_ideal",
        worst,
        TARGET,
        mad_ratio=round(results["mad"]["ratio"], 4),
        debate_ratio=round(results["debate"]["ratio"], 4),
        mad_cpu_ms_per_call=round(results["mad"]["cpu_ms_per_call"], 3),
        debate_cpu_ms_per_call=round(results["debate"]["cpu_ms_per_call"], 3),
        mad_calls=results["mad"]["calls"],
        debate_calls=results["debate"]["calls"],
        errors=sum(int(result["errors"]) for result in results.values()),
        mad_ratios=[round(r["ratio"], 3) for r in runs["mad"]],
        debate_ratios=[round(r["ratio"], 3) for r in runs["debate"]],
        samples=args.samples,
        concurrency=args.concurrency,
        workers=workers,
    )


if __name__ == "__main__":
    main()
