"""`mars demo`: the main job end to end on the embedded defaults (tiny model, CPU server).

Each step prints what it does; the whole demo needs no download and no GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from core.errors import MarsError
from mars.commands.app import app

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
    result = subprocess.run([sys.executable, "-m", "mars", *args], check=False)
    if result.returncode != 0:
        raise MarsError(f"demo step failed: mars {args[0]} exited with {result.returncode}")


def _step(title: str) -> None:
    console.rule(f"[bold]{title}")


async def _chat_through_endpoint(base_url: str, model: str, identity: str) -> None:
    import asyncio

    from core.endpoint import Endpoint, EndpointConfig, GenerationConfig

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


# The paper in miniature: AT-GRPO self-play on Kuhn Poker, whose learning is measured exactly
# (exploitability), from a format-only start: K = 4 replies per turn with every legal action among
# them, groups centred within the deal and divided by the information state's spread
# (docs/estimators.md, `state_std`), the KL magnet to the near-uniform start, four PPO epochs.
DEMO_GAMES = "kuhn_poker"
DEMO_TRAIN = {
    "estimator": "at_grpo",
    "estimator_options": {"scale": "state_std"},
    "tree": {"branches": 4, "all_actions": True},
    "ppo_epochs": 4,
    "kl_coef": 0.2,
    "learning_rate": 3e-4,
    "warmup_steps": 3,
    "min_lr_ratio": 0.5,
    "max_new_tokens": 96,
    "temperature": 1.0,
}
# The demo runs alone: the update's batches use two cores about 1.6x faster than one.
TRAIN_THREADS = max(1, min(4, os.cpu_count() or 1))
KUHN_SAMPLES = 96  # replies per information state: the interval of a near-uniform start is +-0.05


@app.command("demo")
def demo(
    out: Path = typer.Option(None, help="Where the demo's runs go (default: runs/demo-TIME)."),
    train_steps: int = typer.Option(50, help="Self-play training steps (updates)."),
    games_per_step: int = typer.Option(32, help="Self-play games per step."),
) -> None:
    """The paper in miniature on CPU: serve, evaluate, pre-train, self-play train, re-evaluate
    (about 12 minutes on 2 cores)."""
    import asyncio

    from core.servers import ModelServer
    from core.tiny_model import ensure_tiny_model

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

        target = ["--base-url", server.base_url, "--model", server.served_name, *_suite_data()]
        _step("4. reasoning suites through three multi-agent systems")
        eval_runs = []
        for mas_name in ("single", "mad", "autogen"):
            run_dir = out / f"eval-{mas_name}"
            _mars("eval", "--suite", "gsm8k,aqua", "--limit", "3", "--mas", mas_name,
                  "--max-tokens", "64", "--concurrency", "8", "--run-dir", str(run_dir),
                  "--quiet", *target)  # fmt: skip
            eval_runs.append(str(run_dir))
        _mars("report", *eval_runs, "--save", str(out))
    console.print("server stopped")

    _step("5. format pre-training: legal replies, no strategy")
    start = _format_pretrained_model()

    _step("6. AT-GRPO self-play on Kuhn Poker (tree sampling, information-state spread)")
    train_dir = out / "train"
    config = out / "train.yaml"
    config.write_text(json.dumps(DEMO_TRAIN))  # JSON is YAML
    _mars("train", "--trainer", "local", "--model", str(start), "--games", DEMO_GAMES,
          "--steps", str(train_steps),
          "--games-per-step", str(games_per_step), "--save-every", str(train_steps),
          "--eval-every", "0", "--config", str(config), "--run-dir", str(train_dir),
          "--threads", str(TRAIN_THREADS), "--quiet")  # fmt: skip

    _step("7. every checkpoint back into evaluation, served (mars loop, the start as step 0)")
    loop_dir = out / "loop"
    evals = f"exploit:kuhn_poker:{KUHN_SAMPLES}"
    _mars("loop", "--watch", str(train_dir), "--baseline", str(start), "--once",
          "--eval", evals, "--temperature", "1", "--run-dir", str(loop_dir))  # fmt: skip

    _step("8. before / after, from the learning curve")
    _print_before_after(loop_dir)
    console.print(f"all runs: {out}  (browse them with: mars dashboard --runs {out})")


DEMO_SUITE_FILES = ("gsm8k/test.jsonl", "aqua/test.json")


def _suite_data() -> list[str]:
    """The demo's suites from the test sets where this machine has them (a data root, or the
    hub); else from the three-question samples shipped with the project, and it says so."""
    import harness.benchmarks
    from harness.benchmarks.sources import candidate_roots, hub_unavailable_reason

    roots = [root for _, root in candidate_roots(None)]
    if any(all((root / f).is_file() for f in DEMO_SUITE_FILES) for root in roots):
        return []
    if hub_unavailable_reason() is None:
        return []
    samples = Path(harness.benchmarks.__file__).parent / "demo_samples"
    console.print(
        "no local copy of the test sets ($MARS_DATA_DIR, the cache) and no hub: the demo asks "
        f"the three questions of each suite shipped in {samples} (`mars data list`)"
    )
    return ["--data-dir", str(samples)]


def _format_pretrained_model() -> Path:
    """The format-only starting model (cached after the first demo) and its legal-move rates."""
    from train_backend.pretrain.build import (
        SELFPLAY_START,
        SELFPLAY_START_NAME,
        ensure_pretrained_tiny_model,
        read_report,
    )

    console.print("fine-tuning on transcripts of random legal play (cached after the first run)")
    folder = ensure_pretrained_tiny_model(SELFPLAY_START, name=SELFPLAY_START_NAME)
    evaluation = read_report(folder).get("evaluation", {})
    before, after = evaluation.get("legal_rate_before", {}), evaluation.get("legal_rate_after", {})
    table = Table(title=f"legal-move rate on held-out positions ({folder})")
    for column in ("game / prompt style", "before", "after"):
        table.add_column(column)
    for key in sorted(after):
        table.add_row(key, f"{100 * before.get(key, 0):.0f}%", f"{100 * after[key]:.0f}%")
    console.print(table)
    return folder


def before_after_rows(curve: list[dict]) -> list[tuple[str, str, str, str]]:
    """(measure, start, trained, verdict) from the loop's first (step 0) and last rows."""
    first, last = curve[0], curve[-1]
    rows = []
    for key, entry in first["evals"].items():
        after = last["evals"].get(key, {})
        if entry.get("kind") == "exploit" and "exploitability" in after:
            low, high = entry["ci95"]
            low2, high2 = after["ci95"]
            verdict = "better" if high2 < low else ("worse" if low2 > high else "overlapping")
            rows.append((
                "Kuhn exploitability (lower is better)",
                f"{entry['exploitability']:.3f} [{low:.3f}, {high:.3f}]",
                f"{after['exploitability']:.3f} [{low2:.3f}, {high2:.3f}]",
                verdict,
            ))  # fmt: skip
        elif entry.get("kind") == "arena" and "seats" in after:
            seat, seat2 = entry["seats"].get("first", {}), after["seats"].get("first", {})
            if "normalized_return_ci" not in seat or "normalized_return_ci" not in seat2:
                continue
            low, high = seat["normalized_return_ci"]
            low2, high2 = seat2["normalized_return_ci"]
            verdict = "better" if low2 > high else ("worse" if high2 < low else "overlapping")
            game = key.split("-")[1] if "-" in key else key
            rows.append((
                f"{game} score, % of max (higher is better)",
                f"{seat['normalized_return']:.1f} [{low:.1f}, {high:.1f}]",
                f"{seat2['normalized_return']:.1f} [{low2:.1f}, {high2:.1f}]",
                verdict,
            ))  # fmt: skip
    return rows


def card_use_rows(curve: list[dict]) -> list[tuple[str, str, str]]:
    """(information state, P(bet) at the start, P(bet) trained) of the curve's Kuhn evaluation,
    in card order: the table that shows whether the trained policy uses its card."""
    first, last = curve[0], curve[-1]
    for key, entry in first["evals"].items():
        before = entry.get("action_shares") if entry.get("kind") == "exploit" else None
        after = last["evals"].get(key, {}).get("action_shares")
        if before and after:
            order = sorted(before, key=lambda state: ("JQK".find(state[:1]), state))
            return [
                (state, f"{before[state].get('BET', 0):.2f}", f"{after[state].get('BET', 0):.2f}")
                for state in order
                if state in after
            ]
    return []


def _print_before_after(loop_dir: Path) -> None:
    from core.files import read_jsonl
    from mars.orchestration.loop import CURVE_JSONL

    curve = read_jsonl(loop_dir / CURVE_JSONL).rows
    if len(curve) < 2 or curve[0]["step"] != 0:
        raise MarsError(f"the learning curve in {loop_dir} lacks the start or a trained step")
    table = Table(title=f"step 0 (start) vs step {curve[-1]['step']} (trained), 95% intervals")
    for column in ("measure", "start", "trained", "intervals"):
        table.add_column(column)
    for row in before_after_rows(curve):
        table.add_row(*row)
    console.print(table)
    shares = card_use_rows(curve)
    if shares:
        table = Table(title="Kuhn: P(bet or call) per information state (card, moves so far)")
        for column in ("state", "start", "trained"):
            table.add_column(column)
        for row in shares:
            table.add_row(*row)
        console.print(table)
