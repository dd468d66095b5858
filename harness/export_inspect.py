"""An eval run directory as Inspect eval logs, written with inspect_ai's own log types and writer.

Inspect logs one task per file, so each suite of the run becomes one log: its samples (one per
sample x epoch record: input, target, choices, the MAS transcript as chat messages and model
events, the graded output, the grader's score), the suite's aggregate scores, and token usage per
model and per agent role. `inspect view` opens the directory the logs are written to.

What the run format does not keep is not invented: records hold each call's reply, not its
request, so model events have an empty input; calls have no wall-clock times, so every event
carries the run's start time and only its duration (`working_time`) is the call's own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from inspect_ai.event import ModelEvent
from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalError,
    EvalLog,
    EvalMetric,
    EvalPlan,
    EvalPlanStep,
    EvalResults,
    EvalRevision,
    EvalSample,
    EvalScore,
    EvalSpec,
    EvalStats,
    write_eval_log,
)
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageUser,
    ContentReasoning,
    ContentText,
    GenerateConfig,
    ModelConfig,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.scorer import CORRECT, INCORRECT, NOANSWER, Score

from core.errors import MarsError
from core.names import a_run_of
from core.runstore import RunDir, RunInfo, RunStatus

SCORER = "mars_grader"
LOG_FORMATS = {".eval": "eval", ".json": "json"}
_STATUS = {
    RunStatus.COMPLETED: "success",
    RunStatus.COMPLETED_WITH_ERRORS: "success",
    RunStatus.INTERRUPTED: "cancelled",
    RunStatus.FAILED: "error",
    RunStatus.RUNNING: "started",
}
_STOP_REASONS = {"stop": "stop", "length": "max_tokens", "content_filter": "content_filter"}
_RECORD_FIELDS = ("suite_version", "sample_id", "epoch", "extracted", "extraction_failed")


def export_inspect(run_path: Path, output: Path | None = None) -> list[Path]:
    """Write one Inspect log per suite of the eval run at `run_path`; return the files written.

    `output` is a directory (default `RUN/inspect/`), or a file ending in `.eval` or `.json`
    when the run has a single suite.
    """
    run_path = Path(run_path)
    if not run_path.is_dir():
        raise MarsError(f"{run_path}: no such run directory")
    run = RunDir.open(run_path)
    info = run.info()
    if info.kind != "eval":
        raise MarsError(f"{run_path} is {a_run_of(info.kind)}; only eval runs export to Inspect")
    by_suite = _records_by_suite(run.records())
    if not by_suite:
        raise MarsError(f"{run_path} has no eval records to export")
    targets = _targets(run_path, info, sorted(by_suite), output)
    summary = (run.summary() or {}).get("suites", {})
    written = []
    for suite, path in targets.items():
        log = build_log(run_path, info, suite, by_suite[suite], summary.get(suite) or {})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_eval_log(log, str(path), format=LOG_FORMATS[path.suffix])
        except OSError as exc:
            raise MarsError(f"cannot write {path}: {exc.strerror or exc}") from exc
        written.append(path)
    return written


def _records_by_suite(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One record per (suite, sample, epoch): the first without an error, else the last one."""
    chosen: dict[tuple[str, str, int], dict[str, Any]] = {}
    for record in records:
        try:
            key = (str(record["suite"]), str(record["sample_id"]), int(record["epoch"]))
        except (KeyError, TypeError, ValueError):
            continue
        if key not in chosen or chosen[key].get("error"):
            chosen[key] = record
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (suite, _, _), record in chosen.items():
        by_suite[suite].append(record)
    return dict(by_suite)


def _targets(
    run_path: Path, info: RunInfo, suites: list[str], output: Path | None
) -> dict[str, Path]:
    if output is not None and output.suffix in LOG_FORMATS:
        if len(suites) > 1:
            raise MarsError(
                f"{run_path} holds {len(suites)} suites ({', '.join(suites)}), one Inspect log "
                f"each: give -o a directory, not the file {output}"
            )
        return {suites[0]: output}
    directory = output if output is not None else run_path / "inspect"
    if directory.exists() and not directory.is_dir():
        raise MarsError(f"-o {directory} is a file; give a directory or a .eval/.json file name")
    stamp = _started(info).strftime("%Y-%m-%dT%H-%M-%S+00-00")
    # Inspect's own file names: {timestamp}_{task}_{id}, the task without underscores.
    return {
        suite: directory / f"{stamp}_{suite.replace('_', '-')}_{_id(run_path, suite)}.eval"
        for suite in suites
    }


def build_log(
    run_path: Path,
    info: RunInfo,
    suite: str,
    records: list[dict[str, Any]],
    suite_summary: dict[str, Any],
) -> EvalLog:
    """The Inspect log of one suite of an eval run."""
    config = info.config
    records = sorted(records, key=lambda r: int(r["epoch"]))
    samples = [_sample(record, info) for record in records]
    sample_ids = list(dict.fromkeys(str(r["sample_id"]) for r in records))
    started = _started(info)
    data = (config.get("data") or {}).get(suite) or {}
    generation = GenerateConfig(**_generation(config))
    mas_name = str(config.get("mas", "single"))
    mas_config = config.get("mas_config") or {}
    spec = EvalSpec(
        eval_id=_id(run_path, suite),
        run_id=_id(run_path),
        created=started.isoformat(),
        task=suite,
        task_id=_id(run_path, suite),
        task_version=str(data.get("version") or records[0].get("suite_version") or 0),
        solver=f"mars/{mas_name}",
        solver_args=mas_config,
        dataset=EvalDataset(
            name=suite,
            location=data.get("source"),
            samples=len(sample_ids),
            sample_ids=sample_ids,
        ),
        model=info.model or "unknown",
        model_generate_config=generation,
        model_base_url=(info.endpoint or {}).get("base_url"),
        model_roles=_model_roles(config) or None,
        config=EvalConfig(limit=config.get("limit"), epochs=config.get("epochs")),
        revision=(
            EvalRevision(type="git", origin="", commit=info.git_revision)
            if info.git_revision
            else None
        ),
        packages=dict(info.versions),
        metadata={"mars_run": str(run_path), "mars_command": info.command},
    )
    plan = EvalPlan(
        name="mars",
        steps=[EvalPlanStep(solver=f"mars/{mas_name}", params=mas_config)],
        config=generation,
    )
    graded = [s for s in samples if s.scores]
    results = EvalResults(
        total_samples=len(samples),
        completed_samples=len(graded),
        scores=[_aggregate(graded, len(samples), suite_summary)],
        metadata={"mars_summary": suite_summary} if suite_summary else None,
    )
    stats = EvalStats(
        started_at=started.isoformat(),
        completed_at=info.ended_at or "",
        model_usage=_total_usage(s.model_usage for s in samples),
        role_usage=_total_usage(s.role_usage for s in samples),
    )
    return EvalLog(
        status=_STATUS.get(info.status, "started"),  # type: ignore[arg-type]
        eval=spec,
        plan=plan,
        results=results,
        stats=stats,
        samples=samples,
    )


def _sample(record: dict[str, Any], info: RunInfo) -> EvalSample:
    transcript = record.get("transcript") or {}
    question = str(record.get("question") or "")
    messages: list[ChatMessage] = [ChatMessageUser(content=question, source="input")]
    events: list[ModelEvent] = []
    model_usage: dict[str, ModelUsage] = defaultdict(ModelUsage)
    role_usage: dict[str, ModelUsage] = defaultdict(ModelUsage)
    started = _started(info)
    for call in transcript.get("messages") or []:
        agent = str(call.get("agent") or "assistant")
        model = _model_of(agent, info)
        usage = _usage(call.get("usage") or {})
        reply = ChatMessageAssistant(
            content=_content(call),
            source="generate",
            model=model,
            metadata={
                key: call.get(key)
                for key in ("agent", "round", "finish_reason", "latency_s", "retries", "cached")
            },
        )
        messages.append(reply)
        model_usage[model] += usage
        role_usage[agent] += usage
        events.append(
            ModelEvent(
                timestamp=started,
                working_start=0.0,
                model=model,
                role=agent,
                input=[],
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=ModelOutput(
                    model=model,
                    choices=[ChatCompletionChoice(message=reply, stop_reason=_stop(call))],
                    usage=usage,
                    time=call.get("latency_s"),
                ),
                retries=call.get("retries") or None,
                cache="read" if call.get("cached") else None,
                working_time=call.get("latency_s"),
            )
        )
    error = record.get("error")
    final = str(record.get("final_answer") or "")
    output = ModelOutput.from_content(info.model or "unknown", final) if not error else None
    if output is not None:
        output.usage = sum(model_usage.values(), ModelUsage())
        output.time = record.get("latency_s")
    metadata = {key: record.get(key) for key in _RECORD_FIELDS}
    metadata["mas"] = record.get("metrics") or {}
    if transcript.get("extra"):
        metadata["mas_extra"] = transcript["extra"]
    return EvalSample(
        id=str(record["sample_id"]),
        epoch=int(record["epoch"]) + 1,  # Inspect counts epochs from 1
        input=question,
        choices=record.get("choices") or None,
        target=str(record.get("gold", "")),
        messages=messages,
        output=output or ModelOutput(),
        scores=None if error else {SCORER: _score(record)},
        metadata=metadata,
        events=events,  # type: ignore[arg-type]
        model_usage=dict(model_usage),
        role_usage=dict(role_usage),
        total_time=record.get("latency_s"),
        error=EvalError(message=str(error), traceback="", traceback_ansi="") if error else None,
    )


def _score(record: dict[str, Any]) -> Score:
    if record.get("extraction_failed"):
        value = NOANSWER
    else:
        value = CORRECT if record.get("correct") else INCORRECT
    explanation = (
        "no answer could be extracted"
        if value == NOANSWER
        else f"extracted {record.get('extracted')!r}, gold {record.get('gold')!r}"
    )
    return Score(
        value=value,
        answer=record.get("extracted"),
        explanation=explanation,
        metadata={"extraction_failed": bool(record.get("extraction_failed"))},
    )


def _aggregate(graded: list[EvalSample], total: int, suite_summary: dict[str, Any]) -> EvalScore:
    """Accuracy over the graded samples, plus the summary's intervals and k-sample figures."""
    metrics: dict[str, EvalMetric] = {}
    if graded:
        correct = sum(s.scores[SCORER].value == CORRECT for s in graded if s.scores)
        metrics["accuracy"] = EvalMetric(name="accuracy", value=correct / len(graded))
    for key, value in suite_summary.items():
        if _is_interval(value):
            for bound, number in zip(("lower", "upper"), value, strict=True):
                name = f"{key}_{bound}"
                metrics[name] = EvalMetric(name=name, value=number)
        elif key.endswith("_at_k") and _is_number(value):
            metrics[key] = EvalMetric(name=key, value=value)
    return EvalScore(
        name=SCORER,
        scorer=SCORER,
        scored_samples=len(graded),
        unscored_samples=total - len(graded),
        metrics=metrics,
    )


def _content(call: dict[str, Any]) -> list[ContentReasoning | ContentText]:
    content: list[ContentReasoning | ContentText] = []
    if call.get("reasoning"):
        content.append(ContentReasoning(reasoning=str(call["reasoning"])))
    content.append(ContentText(text=str(call.get("text") or "")))
    return content


def _usage(usage: dict[str, Any]) -> ModelUsage:
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    reasoning = usage.get("reasoning_tokens")
    return ModelUsage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        reasoning_tokens=int(reasoning) if reasoning is not None else None,
    )


def _total_usage(per_sample: Any) -> dict[str, ModelUsage]:
    totals: dict[str, ModelUsage] = defaultdict(ModelUsage)
    for usage in per_sample:
        for name, value in usage.items():
            totals[name] += value
    return dict(totals)


def _model_of(agent: str, info: RunInfo) -> str:
    """The model that answered `agent`: its `--role` mapping, else the run's model."""
    role = ((info.config.get("roles") or {}).get(agent)) or {}
    mapped = role.get("model") if isinstance(role, dict) else None
    return str(mapped or info.model or "unknown")


def _model_roles(config: dict[str, Any]) -> dict[str, ModelConfig]:
    roles: dict[str, ModelConfig] = {}
    for name, target in (config.get("roles") or {}).items():
        if isinstance(target, dict) and target.get("model"):
            roles[name] = ModelConfig(model=str(target["model"]), base_url=target.get("base_url"))
    return roles


def _generation(config: dict[str, Any]) -> dict[str, Any]:
    generation = config.get("generation") or {}
    fields = ("temperature", "top_p", "max_tokens", "seed")
    return {key: generation[key] for key in fields if generation.get(key) is not None}


def _stop(call: dict[str, Any]) -> Any:
    return _STOP_REASONS.get(str(call.get("finish_reason")), "unknown")


def _started(info: RunInfo) -> dt.datetime:
    try:
        started = dt.datetime.fromisoformat(info.started_at)
    except ValueError:
        return dt.datetime.now(dt.UTC)
    return started if started.tzinfo else started.replace(tzinfo=dt.UTC)


def _id(*parts: object) -> str:
    """A stable id, so exporting a run again rewrites the same files."""
    text = "\0".join(str(Path(p).resolve()) if isinstance(p, Path) else str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:22]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_interval(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) == 2 and all(map(_is_number, value))
