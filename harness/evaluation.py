"""The reasoning-suite runner behind `mars eval`.

All samples of all suites (times epochs) run concurrently on one asyncio loop: a pool of workers
takes (suite, sample, epoch) items and calls the solver (a MAS, wired in by the CLI); the
endpoint's semaphore bounds the model calls in flight. Each finished sample is graded and appended
to records.jsonl at once, so a killed run loses only the samples in flight, and a rerun with the
same run directory redoes exactly what is missing or errored.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.benchmarks import Sample, Suite
from harness.errors import EndpointError
from harness.graders import Grader, grade_by_rules
from harness.runstore import RunDir, identity_of
from harness.stats import pass_at_k, wilson_ci


@dataclass(frozen=True)
class WorkItem:
    suite: Suite
    sample: Sample
    epoch: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.suite.name, self.sample.id, self.epoch)

    @property
    def prompt(self) -> str:
        return self.suite.prompt(self.sample)


@dataclass
class SolvedSample:
    """What a solver returns: the text to grade, the full transcript and per-sample metrics."""

    final_answer: str
    transcript: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


Solver = Callable[[WorkItem], Awaitable[SolvedSample]]


# Settings of `mars eval`'s config that say how much or how fast, not what a record means: a
# resume may change them. Everything else in the config is part of the run's identity.
RESUMABLE_SETTINGS = ("limit", "epochs", "concurrency", "data", "roles")


def eval_identity(config: dict[str, Any], model: str | None) -> dict[str, Any]:
    """What an eval run's records mean (`RunDir.check_identity`): the config without its
    resumable settings, the suites as a set with their versions, the model of each role (not
    its URL), and the model (left out while not known yet)."""
    extra: dict[str, Any] = {
        "suites": sorted(config["suites"]),
        "suite_versions": {
            name: data.get("version") for name, data in sorted(config.get("data", {}).items())
        },
        "roles": {role: t.get("model") for role, t in config.get("roles", {}).items()},
    }
    if model is not None:
        extra["model"] = model
    return identity_of("eval", config, resumable=RESUMABLE_SETTINGS, **extra)


def record_key(record: dict[str, Any]) -> Hashable:
    return (record["suite"], str(record["sample_id"]), int(record["epoch"]))


def build_record(
    item: WorkItem,
    solved: SolvedSample | None,
    error: str | None,
    latency: float,
    grade: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sample = item.sample
    record: dict[str, Any] = {
        "suite": item.suite.name,
        "suite_version": item.suite.version,
        "sample_id": sample.id,
        "epoch": item.epoch,
        "question": sample.question,
        "choices": sample.choices,
        "gold": sample.gold,
        "extracted": None,
        "correct": False,
        "extraction_failed": False,
        "error": error,
        "final_answer": None,
        "latency_s": round(latency, 4),
    }
    if solved is not None:
        record.update(
            **(grade or {}),
            final_answer=solved.final_answer,
            transcript=solved.transcript,
            metrics=solved.metrics,
        )
    return record


class _SuiteProgress:
    """A rich progress bar per suite: done / errors / retries / running accuracy."""

    def __init__(self, totals: dict[str, int], console: Console | None) -> None:
        self.progress = Progress(
            TextColumn("{task.fields[suite]:>13}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "acc {task.fields[acc]}  err {task.fields[errors]}  retry {task.fields[retries]}"
            ),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks = {
            name: self.progress.add_task(
                name, total=total, suite=name, acc="-", errors=0, retries=0
            )
            for name, total in totals.items()
        }
        self.stats: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def update(self, record: dict[str, Any]) -> None:
        stats = self.stats[record["suite"]]
        stats["done"] += 1
        stats["errors"] += int(bool(record.get("error")))
        stats["correct"] += int(bool(record.get("correct")))
        stats["retries"] += _retries_of(record)
        graded = stats["done"] - stats["errors"]
        self.progress.update(
            self.tasks[record["suite"]],
            advance=1,
            acc=f"{stats['correct'] / graded:.3f}" if graded else "-",
            errors=stats["errors"],
            retries=stats["retries"],
        )


def _retries_of(record: dict[str, Any]) -> int:
    messages = (record.get("transcript") or {}).get("messages") or []
    return sum(int(m.get("retries", 0)) for m in messages)


async def run_items(
    items: Sequence[WorkItem],
    solver: Solver,
    run: RunDir,
    *,
    workers: int,
    console: Console | None = None,
    show_progress: bool = True,
    grader: Grader = grade_by_rules,
) -> int:
    """Solve, grade and record every item; returns the number of records written."""
    queue: asyncio.Queue[WorkItem] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    totals: dict[str, int] = defaultdict(int)
    for item in items:
        totals[item.suite.name] += 1
    progress = _SuiteProgress(dict(totals), console)
    written = 0

    async def worker() -> None:
        nonlocal written
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            started = time.perf_counter()
            solved: SolvedSample | None = None
            error: str | None = None
            try:
                solved = await solver(item)
            except EndpointError as exc:
                error = f"EndpointError: {exc}"
            except Exception as exc:  # one broken sample must not sink the run; it is recorded
                error = f"{type(exc).__name__}: {exc}"
            grade: dict[str, Any] | None = None
            if solved is not None:
                try:  # off the event loop, with a time limit (harness.graders)
                    grade = await grader(item, solved)
                except Exception as exc:  # a grading failure is this sample's error
                    error = f"{type(exc).__name__}: {exc}"
            record = build_record(item, solved, error, time.perf_counter() - started, grade)
            run.append(record)
            written += 1
            progress.update(record)

    if show_progress:
        progress.progress.start()
    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(workers, len(items) or 1)))))
    finally:
        if show_progress:
            progress.progress.stop()
    return written


def summarize(records: list[dict[str, Any]], *, wall_s: float | None = None) -> dict[str, Any]:
    """Per suite: accuracy with a Wilson 95% CI, extraction failures, errors, cost, mean@k, pass@k.

    Accuracy is over graded attempts (errors are counted apart, never scored as wrong); each
    (sample, epoch) is one attempt.
    """
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_suite[record["suite"]].append(record)
    suites: dict[str, Any] = {}
    for name, rows in sorted(by_suite.items()):
        graded = [r for r in rows if not r.get("error")]
        correct = sum(bool(r.get("correct")) for r in graded)
        n = len(graded)
        per_sample: dict[str, list[bool]] = defaultdict(list)
        per_epoch: dict[int, list[bool]] = defaultdict(list)
        for r in graded:
            per_sample[str(r["sample_id"])].append(bool(r.get("correct")))
            per_epoch[int(r["epoch"])].append(bool(r.get("correct")))
        epochs = max((len(v) for v in per_sample.values()), default=0)
        tokens = [_tokens_of(r) for r in graded]
        calls = [int((r.get("metrics") or {}).get("llm_calls", 0)) for r in graded]
        lo, hi = wilson_ci(correct, n)
        suites[name] = {
            "n": n,
            "correct": correct,
            "accuracy": correct / n if n else 0.0,
            "ci95": [lo, hi],
            "extraction_failure_rate": (
                sum(bool(r.get("extraction_failed")) for r in graded) / n if n else 0.0
            ),
            "errors": len(rows) - n,
            "samples": len(per_sample),
            "epochs": epochs,
            "mean_tokens": sum(tokens) / n if n else 0.0,
            "mean_llm_calls": sum(calls) / n if n else 0.0,
            "mean_latency_s": sum(float(r.get("latency_s", 0)) for r in graded) / n if n else 0.0,
        }
        if epochs > 1:
            suites[name]["mean_at_k"] = sum(sum(v) / len(v) for v in per_epoch.values()) / len(
                per_epoch
            )
            suites[name]["pass_at_k"] = sum(
                pass_at_k(len(v), sum(v), len(v)) for v in per_sample.values()
            ) / len(per_sample)
    summary: dict[str, Any] = {"suites": suites}
    if wall_s is not None:
        summary["wall_s"] = round(wall_s, 3)
    return summary


def _tokens_of(record: dict[str, Any]) -> int:
    per_agent = (record.get("metrics") or {}).get("tokens_per_agent") or {}
    return sum(
        int(v.get("prompt_tokens", 0)) + int(v.get("completion_tokens", 0))
        for v in per_agent.values()
    )
