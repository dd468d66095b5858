"""`mars demo`: the main job end to end on the embedded defaults (tiny model, CPU server).

Each step prints what it does; the whole demo needs no download and no GPU.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from harness.cli.main import app
from harness.errors import MarsError

console = Console()

DEMO_PROMPTS = (
    "You play tic-tac-toe as X. Legal actions: <X(0,0)> <X(1,1)> <X(2,2)>. "
    "Reply with <answer>ACTION</answer>.",
    "Tom has 3 apples and buys 4 more. How many apples does he have? Put the answer in \\boxed{}.",
    "Which is a prime number? (A) 4 (B) 6 (C) 7 (D) 9. Answer with \\boxed{LETTER}.",
    "Kuhn poker: you hold the King. Legal actions: <PASS> <BET>. "
    "Reply with <answer>ACTION</answer>.",
)


def _mars(*args: str) -> None:
    """Run one `mars` command as its own process, as a user would; stop the demo if it fails."""
    console.print(f"[dim]$ mars {' '.join(args)}[/dim]")
    result = subprocess.run([sys.executable, "-m", "harness", *args], check=False)
    if result.returncode != 0:
        raise MarsError(f"demo step failed: mars {args[0]} exited with {result.returncode}")


def _step(title: str) -> None:
    console.rule(f"[bold]{title}")


async def _chat_through_endpoint(base_url: str, model: str, identity: str) -> None:
    from harness.endpoint import Endpoint, EndpointConfig, GenerationConfig

    endpoint = Endpoint(
        EndpointConfig(base_url=base_url, model=model, model_identity=identity, concurrency=4)
    )
    gen = GenerationConfig(temperature=0.0, max_tokens=48)
    try:
        replies = await asyncio.gather(
            *(
                endpoint.complete([{"role": "user", "content": prompt}], role=f"agent{i}", gen=gen)
                for i, prompt in enumerate(DEMO_PROMPTS)
            )
        )
    finally:
        await endpoint.aclose()
    table = Table(title="replies (tiny model, 4 requests in flight)")
    for column in ("role", "reply", "prompt tok", "completion tok", "latency s"):
        table.add_column(column)
    for i, reply in enumerate(replies):
        table.add_row(
            f"agent{i}",
            reply.text[:70].replace("\n", " "),
            str(reply.usage.prompt_tokens),
            str(reply.usage.completion_tokens),
            f"{reply.latency_s:.2f}",
        )
    console.print(table)
    totals = endpoint.ledger.totals()
    console.print(
        f"usage: {totals['calls']} calls, {totals['prompt_tokens']} prompt tokens, "
        f"{totals['completion_tokens']} completion tokens, {totals['retries']} retries"
    )


@app.command("demo")
def demo(
    out: Path = typer.Option(Path("runs/demo"), help="Where the demo's runs go."),
) -> None:
    """Build the tiny model, serve it on CPU, and talk to it through the endpoint layer."""
    from harness.servers import ModelServer
    from harness.tiny_model import ensure_tiny_model

    _step("1. the embedded tiny model")
    model_dir = ensure_tiny_model()
    console.print(f"model: {model_dir}")

    _step("2. serve it with `transformers serve` on CPU")
    out.mkdir(parents=True, exist_ok=True)
    with ModelServer(model=str(model_dir), backend="transformers", log_dir=out) as server:
        server.warm_up(temperature=0.0, top_p=1.0)
        console.print(f"base url: {server.base_url} (log: {server.log_path})")

        _step("3. concurrent chat requests through the endpoint layer")
        asyncio.run(_chat_through_endpoint(server.base_url, server.served_name, server.identity))

        target = ["--base-url", server.base_url, "--model", server.served_name]
        _step("4. reasoning suites through three multi-agent systems")
        eval_runs = []
        for mas_name in ("single", "mad", "autogen"):
            run_dir = out / f"eval-{mas_name}"
            _mars("eval", "--suite", "gsm8k,aqua", "--limit", "3", "--mas", mas_name,
                  "--max-tokens", "64", "--concurrency", "8", "--run-dir", str(run_dir),
                  "--quiet", *target)  # fmt: skip
            eval_runs.append(str(run_dir))
        _mars("report", *eval_runs, "--save", str(out))

        _step("5. game arena: the tiny model against a random player")
        _mars("arena", "--game", "tic_tac_toe", "--player", "llm", "--opponent", "random",
              "--episodes", "10", "--prompt-style", "compact", "--max-tokens", "48",
              "--run-dir", str(out / "arena-tic_tac_toe"), *target)  # fmt: skip
    console.print("server stopped")
