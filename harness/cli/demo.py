"""`mars demo`: the main job end to end on the embedded defaults (tiny model, CPU server).

Each step prints what it does; the whole demo needs no download and no GPU.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
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


ARENA_FLAGS = ("--game", "tic_tac_toe", "--player", "llm", "--opponent", "random",
               "--prompt-style", "compact", "--max-tokens", "48", "--temperature", "0")  # fmt: skip


@app.command("demo")
def demo(
    out: Path = typer.Option(None, help="Where the demo's runs go (default: runs/demo-TIME)."),
    train_steps: int = typer.Option(12, help="Self-play training steps (updates)."),
    arena_episodes: int = typer.Option(20, help="Arena episodes per seat for each model."),
) -> None:
    """The paper in miniature on CPU: serve, evaluate, pre-train, self-play train, re-evaluate."""
    from harness.servers import ModelServer
    from harness.tiny_model import ensure_tiny_model

    out = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
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
        _mars("arena", *ARENA_FLAGS, "--episodes", str(arena_episodes),
              "--run-dir", str(out / "arena-base"), *target)  # fmt: skip
    console.print("server stopped")

    _step("6. format pre-training: answer <answer>ACTION</answer> with a legal move")
    pretrained = _format_pretrained_model()
    _mars("arena", *ARENA_FLAGS, "--episodes", str(arena_episodes), "--model", str(pretrained),
          "--run-dir", str(out / "arena-pretrained"))  # fmt: skip

    _step("7. self-play training on tic-tac-toe (turn-level, agent-normalised advantages)")
    train_dir = out / "train"
    _mars("train", "--backend", "local", "--model", str(pretrained), "--games", "tic_tac_toe",
          "--estimator", "marshal", "--steps", str(train_steps), "--games-per-step", "32",
          "--save-every", str(train_steps), "--eval-every", "0",
          "--run-dir", str(train_dir))  # fmt: skip
    trained = _latest_checkpoint(train_dir)

    _step("8. serve the new checkpoint and evaluate it again")
    _mars("arena", *ARENA_FLAGS, "--episodes", str(arena_episodes), "--model", str(trained),
          "--run-dir", str(out / "arena-trained"))  # fmt: skip
    _mars("eval", "--suite", "gsm8k,aqua", "--limit", "3", "--model", str(trained),
          "--max-tokens", "64", "--run-dir", str(out / "eval-trained"), "--quiet")  # fmt: skip

    _step("9. before / after")
    _print_before_after(out)
    console.print(f"all runs: {out}  (browse them with: mars dashboard --runs {out})")


def _format_pretrained_model() -> Path:
    """The format-pre-trained tiny model (cached after the first demo) and its legal-move rates."""
    from train_backend.pretrain import ensure_pretrained_tiny_model, read_report

    console.print("fine-tuning on transcripts of legal play (cached after the first run) ...")
    folder = ensure_pretrained_tiny_model()
    evaluation = read_report(folder).get("evaluation", {})
    before, after = evaluation.get("legal_rate_before", {}), evaluation.get("legal_rate_after", {})
    table = Table(title=f"legal-move rate on held-out positions ({folder})")
    for column in ("game / prompt style", "before", "after"):
        table.add_column(column)
    for key in sorted(after):
        table.add_row(key, f"{100 * before.get(key, 0):.0f}%", f"{100 * after[key]:.0f}%")
    console.print(table)
    return folder


def _latest_checkpoint(train_dir: Path) -> Path:
    from train_backend.local.checkpoint import latest_checkpoint

    found = latest_checkpoint(train_dir)
    if found is None:
        raise MarsError(f"training wrote no checkpoint under {train_dir}")
    return found[1]


def _print_before_after(out: Path) -> None:
    table = Table(title="tic-tac-toe vs random, greedy (first seat / second seat)")
    for column in ("model", "win", "draw", "loss", "invalid moves", "normalised return"):
        table.add_column(column)
    for label, run in (("tiny model", "arena-base"), ("format pre-trained", "arena-pretrained"),
                       ("self-play trained", "arena-trained")):  # fmt: skip
        seats = json.loads((out / run / "summary.json").read_text())["seats"]
        first, second = seats["first"], seats["second"]

        def pair(key: str, scale: float = 100.0) -> str:
            return f"{scale * first[key]:.0f} / {scale * second[key]:.0f}"  # noqa: B023

        table.add_row(
            label, pair("win"), pair("draw"), pair("loss"), pair("invalid_rate"),
            pair("normalized_return", 1.0),
        )  # fmt: skip
    console.print(table)
