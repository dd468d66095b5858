"""Synthetic run directories in the real formats, for the dashboard's tests and load benchmark.

Everything is written through `core.runstore.RunDir`, so the files are exactly what `mars`
commands write; record contents are deterministic functions of their index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.runstore import RunDir


def eval_record(
    index: int,
    *,
    suite: str = "gsm8k",
    correct: bool = True,
    extraction_failed: bool = False,
    error: str | None = None,
    agents: Sequence[str] = ("affirmative", "negative", "moderator"),
    text_chars: int = 200,
) -> dict[str, Any]:
    """One eval record with a transcript of one message per agent."""
    gold = str(index % 97)
    extracted = None if extraction_failed else (gold if correct else str(index % 97 + 1))
    filler = ("step by step we add the numbers " * (text_chars // 32 + 1))[:text_chars]
    messages = [
        {
            "agent": agent,
            "role": "assistant",
            "round": 1,
            "reasoning": f"<{agent} thinks about sample {index}> {filler}",
            "text": f"{agent} says the answer is {extracted or '?'}. {filler}",
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 100 + i, "completion_tokens": 40 + i},
            "latency_s": 0.5 + i / 10,
            "retries": 0,
            "cached": False,
        }
        for i, agent in enumerate(agents)
    ]
    return {
        "suite": suite,
        "suite_version": "1",
        "sample_id": f"{suite}-{index}",
        "epoch": 0,
        "question": f"Question {index}: what is {index} modulo 97?",
        "choices": None,
        "gold": gold,
        "extracted": extracted,
        "correct": correct and not error and not extraction_failed,
        "extraction_failed": extraction_failed,
        "error": error,
        "final_answer": None if error else f"The answer is \\boxed{{{extracted or '?'}}}",
        "latency_s": 1.5,
        "transcript": {
            "messages": [] if error else messages,
            "final_answer": "" if error else f"\\boxed{{{extracted or '?'}}}",
            "rounds": 1,
            "ended_early": False,
            "stop_reason": "moderator",
        },
        "metrics": {"llm_calls": 0 if error else len(agents), "rounds": 1},
    }


def write_eval_run(
    path: Path,
    records: Sequence[dict[str, Any]],
    *,
    model: str = "tiny",
    mas: str = "mad",
    malformed_lines: int = 0,
) -> RunDir:
    run = RunDir.resolve(out=None, run_dir=path, kind="eval", slug=mas)
    suites = sorted({r["suite"] for r in records})
    run.start(command=["mars", "eval"], config={"suites": suites, "mas": mas}, model=model)
    run.append_many(list(records))
    with run.records_path.open("a", encoding="utf-8") as handle:
        for i in range(malformed_lines):
            handle.write('{"suite": "gsm8k", "cut short' + str(i) + "\n")
    run.finish()
    return run


def arena_record(
    seed: int,
    seat: str,
    *,
    game: str = "tic_tac_toe",
    opponent: str = "mcts:100",
    outcome: str = "win",
) -> dict[str, Any]:
    """An episode record shaped like games.episode.EpisodeResult.to_record + the arena fields."""
    me = 0 if seat == "first" else 1
    value = {"win": 1.0, "draw": 0.0, "loss": -1.0}[outcome]
    returns = [0.0, 0.0]
    returns[me], returns[1 - me] = value, -value
    outcomes = ["draw", "draw"]
    other = {"win": "loss", "loss": "win", "draw": "draw"}[outcome]
    outcomes[me], outcomes[1 - me] = outcome, other
    players = ["model", opponent] if me == 0 else [opponent, "model"]
    turns = []
    for step in range(3):
        seat_to_move = step % 2
        if seat_to_move == me:
            turns.append(
                {
                    "seat": me,
                    "turn": step // 2,
                    "action": f"<X({step},{step})>",
                    "legal": True,
                    "reward": 0.05,
                    "step": step,
                    "prompt": [{"role": "user", "content": f"board at step {step} (seed {seed})"}],
                    "context_len": 2 * (step // 2),
                    "reply": f"I play the diagonal. <answer><X({step},{step})></answer>",
                    "reasoning": f"thinking about step {step}",
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 50, "completion_tokens": 20 + step},
                    "attempt": 0,
                    "error": None,
                    "retried": False,
                }
            )
        else:
            turns.append(
                {
                    "seat": 1 - me,
                    "turn": step // 2,
                    "action": f"<O({step},0)>",
                    "legal": True,
                    "reward": 0.0,
                }
            )
    model_turns = [0, 0]
    model_turns[me] = sum(1 for t in turns if t["seat"] == me)
    return {
        "schema_version": 1,
        "game": game,
        "seed": seed,
        "players": players,
        "returns": returns,
        "rewards": [r + 0.05 for r in returns],
        "outcomes": outcomes,
        "invalid": False,
        "invalid_seat": None,
        "truncated": False,
        "num_actions": len(turns),
        "model_turns": model_turns,
        "invalid_turns": [0, 0],
        "completion_tokens": [0, 0],
        "error": None,
        "turns": turns,
        "seat": seat,
        "player": "model",
        "opponent": opponent,
    }


def write_arena_run(
    path: Path, records: Sequence[dict[str, Any]], summary: dict[str, Any] | None = None
) -> RunDir:
    run = RunDir.resolve(out=None, run_dir=path, kind="arena", slug="arena")
    run.start(command=["mars", "arena"], config={"game": records[0]["game"]}, model="tiny")
    run.append_many(list(records))
    if summary is not None:
        run.write_summary(summary)
    run.finish()
    return run


def write_train_run(
    path: Path, steps: int, *, loss_start: float = 1.0, malformed_lines: int = 0
) -> RunDir:
    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="train")
    run.start(command=["mars", "train"], config={"steps": steps}, model="tiny")
    with (run.path / "metrics.jsonl").open("w", encoding="utf-8") as handle:
        for step in range(steps):
            row = {
                "step": step,
                "loss": loss_start / (step + 1),
                "kl": 0.01 * step,
                "reward_mean": 0.1 * step,
                "invalid_rate": 0.5 / (step + 1),
                "eval/mcts:100/first/win": 0.1 * step,
                "eval/mcts:100/first/ci95": [0.1 * step - 0.05, 0.1 * step + 0.05],
            }
            handle.write(json.dumps(row) + "\n")
        for i in range(malformed_lines):
            handle.write("{broken " + str(i) + "\n")
    run.finish()
    return run


# One Kuhn equilibrium (alpha = 1/6): P(bet or call) per information state title ("<card>
# <moves so far>"), as the trainer's `policy/kuhn_poker/<state>/BET` columns name them.
KUHN_EQUILIBRIUM_BET = {
    "J -": 1 / 6, "Q -": 0.0, "K -": 0.5, "J pb": 0.0, "Q pb": 0.5, "K pb": 1.0,
    "J p": 1 / 3, "Q p": 0.0, "K p": 1.0, "J b": 0.0, "Q b": 1 / 3, "K b": 1.0,
}  # fmt: skip


def kuhn_train_row(step: int, steps: int, *, eval_every: int = 10) -> dict[str, Any]:
    """One metrics.jsonl line of a Kuhn self-play run whose policy moves from uniform to the
    equilibrium: the training figures every step, the 24 action shares every step, and
    exploitability with its interval every `eval_every` steps."""
    progress = step / max(1, steps - 1)
    row: dict[str, Any] = {
        "step": step,
        "loss": 1.0 / (step + 1),
        "kl": 0.001 * step,
        "reward_mean": 0.1 * progress,
        "reward_mean/kuhn_poker/first": 0.1 * progress,
        "reward_mean/kuhn_poker/second": -0.1 * progress,
        "invalid_rate": 0.2 * (1 - progress),
    }
    for state, target in KUHN_EQUILIBRIUM_BET.items():
        bet = 0.5 + (target - 0.5) * progress
        row[f"policy/kuhn_poker/{state}/BET"] = bet
        row[f"policy/kuhn_poker/{state}/PASS"] = 1 - bet
    if step % eval_every == 0 or step == steps - 1:
        value = 0.4583 * (1 - progress)
        row["exploitability/kuhn_poker"] = value
        row["exploitability/kuhn_poker/ci95_low"] = max(0.0, value - 0.03)
        row["exploitability/kuhn_poker/ci95_high"] = value + 0.03
        row["nash_conv/kuhn_poker"] = 2 * value
    return row


def write_kuhn_train_run(path: Path, steps: int) -> RunDir:
    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="train")
    run.start(
        command=["mars", "train"], config={"steps": steps, "games": ["kuhn_poker"]}, model="tiny"
    )
    with (run.path / "metrics.jsonl").open("w", encoding="utf-8") as handle:
        for step in range(steps):
            handle.write(json.dumps(kuhn_train_row(step, steps)) + "\n")
    run.finish()
    return run


def write_loop_run(path: Path, rows: Sequence[dict[str, Any]]) -> RunDir:
    run = RunDir.resolve(out=None, run_dir=path, kind="loop", slug="loop")
    run.start(command=["mars", "loop"], config={}, model="tiny")
    with (run.path / "learning_curve.jsonl").open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    run.finish()
    return run


def write_failures(
    run: RunDir, verdicts: Sequence[dict[str, Any]], malformed_lines: int = 0
) -> None:
    with (run.path / "failures.jsonl").open("w", encoding="utf-8") as handle:
        for verdict in verdicts:
            handle.write(json.dumps(verdict) + "\n")
        for i in range(malformed_lines):
            handle.write("not json " + str(i) + "\n")


def verdict(record: dict[str, Any], modes: Sequence[str], *, parsed: bool = True) -> dict[str, Any]:
    from harness.failures.taxonomy import MODES_BY_ID

    return {
        "schema_version": 1,
        "suite": record["suite"],
        "sample_id": record["sample_id"],
        "epoch": record["epoch"],
        "correct": record["correct"],
        "judge_model": "judge",
        "truncated": False,
        "error": None,
        "parsed": parsed,
        "parse_error": None if parsed else "no JSON object in reply",
        "modes": sorted(modes) if parsed else [],
        "categories": sorted({MODES_BY_ID[m].category for m in modes}) if parsed else [],
        "evidence": {m: f"quote for {m}" for m in modes} if parsed else {},
        "summary": "",
        "unknown_ids": [],
        "raw": "",
        "usage": None,
        "latency_s": None,
    }
