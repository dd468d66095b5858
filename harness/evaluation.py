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

from core.errors import EndpointError
from core.runstore import RunDir, identity_of
from core.stats import Attempt, clustered_wilson_ci, majority_correct, pass_at_k, wilson_ci
from harness.benchmarks import Sample, Suite
from harness.graders import Grader, grade_by_rules


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
    its URL; a served local checkpoint's fingerprint), and the model (left out while not known
    yet)."""
    extra: dict[str, Any] = {
        "suites": sorted(config["suites"]),
        "suite_versions": {
            name: data.get("version") for name, data in sorted(config.get("data", {}).items())
        },
        # A served local checkpoint is known by its weights' fingerprint, as the main model is.
        "roles": {
            role: t.get("fingerprint") or t.get("model")
            for role, t in config.get("roles", {}).items()
        },
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


SLOW_FIRST_S = 20.0  # a first question slower than this gets the time the rest will take


def _announce_pace(
    progress: _SuiteProgress, record: dict[str, Any], seconds: float, total: int, in_flight: int
) -> None:
    """A slow run says early what it will take (a MAS of many calls on a CPU-served tiny model
    takes minutes a question): the first question's time and calls, and the rest at that pace."""
    if seconds < SLOW_FIRST_S or total < 2:
        return
    calls = (record.get("metrics") or {}).get("llm_calls")
    made = f" ({calls} model calls)" if calls else ""
    rest = seconds * (total - 1) / in_flight
    progress.progress.console.print(
        f"note: the first question took {seconds:.0f} s{made}; at this pace the other "
        f"{total - 1} take about {rest / 60:.0f} min ({in_flight} at a time)"
    )


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
    began = time.perf_counter()
    in_flight = max(1, min(workers, len(items) or 1))

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
            if show_progress:
                progress.update(record)
                if written == 1:
                    _announce_pace(
                        progress, record, time.perf_counter() - began, len(items), in_flight
                    )

    if show_progress:
        progress.progress.start()
    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(workers, len(items) or 1)))))
    finally:
        if show_progress:
            progress.progress.stop()
    return written


def question_attempts(
    records: list[dict[str, Any]],
) -> dict[str, dict[str, list[Attempt]]]:
    """Per suite, per sample id: its graded attempts (errored ones left out), in epoch order."""
    out: dict[str, dict[str, list[Attempt]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        if record.get("error"):
            continue
        extracted = record.get("extracted")
        out[record["suite"]][str(record["sample_id"])].append(
            Attempt(
                epoch=int(record["epoch"]),
                extracted=None if extracted is None else str(extracted),
                correct=bool(record.get("correct")),
            )
        )
    for questions in out.values():
        for attempts in questions.values():
            attempts.sort(key=lambda a: a.epoch)
    return out


def summarize(records: list[dict[str, Any]], *, wall_s: float | None = None) -> dict[str, Any]:
    """Per suite: accuracy with a 95% CI, extraction failures, errors, cost; with several epochs
    also maj@k, mean@k and pass@k (docs/run-format.md, docs/benchmarks.md).

    Accuracy is over graded attempts (errors are counted apart, never scored as wrong); each
    (sample, epoch) is one attempt. A suite with no graded attempt has no score: its accuracy,
    interval and rates are None (never 0), and `first_error` says why.
    """
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_suite[record["suite"]].append(record)
    attempts_of = question_attempts(records)
    suites: dict[str, Any] = {}
    for name, rows in sorted(by_suite.items()):
        graded = [r for r in rows if not r.get("error")]
        questions = attempts_of.get(name, {})
        suites[name] = _suite_summary(rows, graded, questions)
    summary: dict[str, Any] = {"suites": suites}
    if wall_s is not None:
        summary["wall_s"] = round(wall_s, 3)
    return summary


def _suite_summary(
    rows: list[dict[str, Any]], graded: list[dict[str, Any]], questions: dict[str, list[Attempt]]
) -> dict[str, Any]:
    n = len(graded)
    correct = sum(bool(r.get("correct")) for r in graded)
    errored = [r for r in rows if r.get("error")]
    epochs = max((len(v) for v in questions.values()), default=0)
    interval = clustered_wilson_ci(
        [sum(a.correct for a in v) for v in questions.values()],
        [len(v) for v in questions.values()],
    )

    def mean(values: list[float]) -> float | None:
        return sum(values) / n if n else None

    out: dict[str, Any] = {
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "ci95": [interval.low, interval.high] if interval else None,
        "ci_method": (
            None if interval is None else "clustered" if interval.clustered else "wilson"
        ),
        "effective_n": round(interval.effective_n, 3) if interval else None,
        "extraction_failure_rate": mean([float(bool(r.get("extraction_failed"))) for r in graded]),
        "errors": len(errored),
        "samples": len(questions),
        "epochs": epochs,
        "mean_tokens": mean([float(_tokens_of(r)) for r in graded]),
        "mean_completion_tokens": mean([float(_tokens_of(r, prompt=False)) for r in graded]),
        "mean_llm_calls": mean(
            [float((r.get("metrics") or {}).get("llm_calls", 0)) for r in graded]
        ),
        "mean_by_role": _means_by_role(graded),
        "mean_latency_s": mean([float(r.get("latency_s", 0)) for r in graded]),
    }
    if errored:
        out["first_error"] = str(errored[0]["error"])
    if epochs > 1:
        out.update(_reducers(questions))
    return out


def _reducers(questions: dict[str, list[Attempt]]) -> dict[str, Any]:
    """maj@k, mean@k and pass@k over the questions of a suite with several epochs."""
    per_epoch: dict[int, list[bool]] = defaultdict(list)
    for attempts in questions.values():
        for a in attempts:
            per_epoch[a.epoch].append(a.correct)
    majority = sum(majority_correct(v) for v in questions.values())
    maj_low, maj_high = wilson_ci(majority, len(questions))
    fewest = min(len(v) for v in questions.values())
    return {
        "mean_at_k": sum(sum(v) / len(v) for v in per_epoch.values()) / len(per_epoch),
        "maj_at_k": majority / len(questions),
        "maj_at_k_ci95": [maj_low, maj_high],
        # k = each question's own number of graded attempts: solved at least once.
        "pass_at_k": sum(
            pass_at_k(len(v), sum(a.correct for a in v), len(v)) for v in questions.values()
        )
        / len(questions),
        # Unbiased pass@k for every k that each question has attempts for.
        "pass_at": {
            str(k): sum(pass_at_k(len(v), sum(a.correct for a in v), k) for v in questions.values())
            / len(questions)
            for k in range(1, fewest + 1)
        },
    }


def _per_agent(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return (record.get("metrics") or {}).get("tokens_per_agent") or {}


def _tokens_of(record: dict[str, Any], *, prompt: bool = True) -> int:
    return sum(
        int(v.get("prompt_tokens", 0)) * prompt + int(v.get("completion_tokens", 0))
        for v in _per_agent(record).values()
    )


def _means_by_role(graded: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each agent role's tokens, completion tokens and calls per graded attempt (an attempt
    that did not call the role counts 0), so the roles add up to the suite's means."""
    sums: dict[str, dict[str, float]] = defaultdict(
        lambda: {"tokens": 0.0, "completion_tokens": 0.0, "llm_calls": 0.0}
    )
    for record in graded:
        for role, usage in _per_agent(record).items():
            completion = float(usage.get("completion_tokens", 0))
            sums[role]["tokens"] += float(usage.get("prompt_tokens", 0)) + completion
            sums[role]["completion_tokens"] += completion
            sums[role]["llm_calls"] += float(usage.get("calls", 0))
    return {
        role: {key: value / len(graded) for key, value in figures.items()}
        for role, figures in sorted(sums.items())
    }
