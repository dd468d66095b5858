"""The steps of an evaluation that `mars.api.evaluate` runs: solving the work items through
the MAS, the usage figures, the summary, a trained run's models, and a compute-matched
baseline's choice of k."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.model_options import ModelOptions


@dataclasses.dataclass(frozen=True)
class EvalWork:
    """How each work item is solved and graded: the MAS, its endpoints and settings."""

    mas_function: Any
    mas_config: dict[str, Any]
    endpoint_config: Any
    role_configs: dict[str, Any]
    gen: Any
    gen_by_role: dict[str, Any]
    grading: Any
    quiet: bool


async def solve_items(
    items: list[Any], work: EvalWork, run: Any, then: Callable[[], list[Any]] | None = None
) -> None:
    """Solve and record `items`; then those `then()` returns (the epochs of a compute-matched
    baseline after its first), on the same endpoints."""
    from core.endpoint import Endpoint
    from core.usage import accumulate_usage_file
    from harness.evaluation import SolvedSample, WorkItem, run_items
    from mas.base import Models, Task

    default = Endpoint(work.endpoint_config)
    by_role = {name: Endpoint(config) for name, config in work.role_configs.items()}
    models = Models(default=default, by_role=by_role, gen=work.gen, gen_by_role=work.gen_by_role)

    async def solve(item: WorkItem) -> SolvedSample:
        task = Task(
            prompt=item.prompt,
            sample_id=item.sample.id,
            suite=item.suite.name,
            epoch=item.epoch,
            kind=item.suite.kind,
            metadata=_task_metadata(item.sample.metadata),
        )
        transcript = await work.mas_function(task, models, work.mas_config)
        return SolvedSample(
            final_answer=transcript.final_answer,
            transcript=transcript.model_dump(),
            metrics=transcript.metrics(),
        )

    async def solve_all(batch: list[WorkItem]) -> None:
        await run_items(
            batch,
            solve,
            run,
            workers=work.endpoint_config.concurrency * 2,
            show_progress=not work.quiet,
            grader=work.grading.grader(models.for_role),
        )

    try:
        await solve_all(items)
        if then is not None:
            await solve_all(then())
    finally:
        for endpoint in (default, *by_role.values()):
            await endpoint.aclose()
        usage: dict[str, Any] = {
            "by_role": default.ledger.by_role(),
            "totals": default.ledger.totals(),
            "roles": _usage_of_roles([default, *by_role.values()]),
        }
        for name, endpoint in by_role.items():
            usage[f"role:{name}"] = endpoint.ledger.totals()
        replicas = default.replica_usage()
        if len(replicas) > 1:  # several servers of one model: what each answered, how fast
            usage["replicas"] = replicas
        accumulate_usage_file(run.path / "usage.json", usage)  # adds up over resumed attempts


def _usage_of_roles(endpoints: list[Any]) -> dict[str, dict[str, Any]]:
    """Each agent role's calls and tokens over every endpoint it called, and the model that
    answered it (several, comma-separated, when a role called more than one)."""
    from core.usage import add_usage

    figures: dict[str, dict[str, Any]] = {}
    models: dict[str, set[str]] = {}
    for endpoint in endpoints:
        for role, usage in endpoint.ledger.by_role().items():
            figures[role] = add_usage(figures.get(role, {}), usage)
            models.setdefault(role, set()).add(endpoint.config.model)
    return {
        role: {"model": ", ".join(sorted(models[role])), **figures[role]}
        for role in sorted(figures)
    }


def shared_adapters(default: str, role_models: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The roles (taken out of `role_models`) whose checkpoint is a LoRA adapter on the same
    base as the default model's adapter: role -> (adapter name, folder), all served by the
    default's one server instead of a server each."""
    from core.checkpoints import adapter_info

    first = adapter_info(Path(default))
    if first is None:
        return {}
    names = {first.name: default}
    shared: dict[str, tuple[str, str]] = {}
    for role, folder in list(role_models.items()):
        info = adapter_info(Path(folder))
        if info is None or info.base != first.base or names.get(info.name, folder) != folder:
            continue  # a whole model, another base or a clashing name: a server of its own
        names[info.name] = folder
        shared[role] = (info.name, folder)
        del role_models[role]
    return shared


# What of a sample's metadata a MAS may see: a puzzle's level (the workflow steps it). A code
# suite's hidden tests stay with the grader.
_VISIBLE_METADATA = ("environment",)


def _task_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    return {key: metadata[key] for key in _VISIBLE_METADATA if key in metadata}


def trained_models(
    run: Path,
    step: int | None,
    mas_name: str | None,
    model_options: ModelOptions,
    role_targets: dict[str, tuple[str, str]],
    mas_config: dict[str, Any],
) -> tuple[str, str, dict[str, str], dict[str, Any], dict[str, Any]]:
    """What `--trained RUN` sets: the MAS, the default model, role -> local model folder, the
    workflow options (the run's, under any --mas-option) and the run's config entry."""
    from train_backend.mas.trained import trained_mas

    if model_options.model or model_options.base_url:
        raise MarsError("--trained picks every role's model: leave out --model and --base-url")
    found = trained_mas(run, step)
    if mas_name not in (None, found.workflow):
        raise MarsError(f"--trained {run} trained the MAS {found.workflow!r}, not {mas_name!r}")
    overlap = sorted(set(role_targets) & set(found.role_models))
    if overlap:
        raise MarsError(f"--role {', '.join(overlap)}: --trained already maps that role")
    folders = {role: str(path.resolve()) for role, path in found.role_models.items()}
    default = next(iter(folders.values()))
    others = {role: folder for role, folder in folders.items() if folder != default}
    entry = {"trained": {"run": str(run.resolve()), "step": found.step, "policies": found.policies}}
    return found.workflow, default, others, {**found.workflow_options, **mas_config}, entry


def trained_sampling(run: Path) -> dict[str, dict[str, Any]]:
    """The run's `eval_role_sampling`, as `--role-sampling` settings (its max_new_tokens is
    max_tokens); the unset fields stay the command's own."""
    from train_backend.mas.trained import eval_role_sampling

    renamed = {"max_new_tokens": "max_tokens"}
    return {
        role: {renamed.get(key, key): value for key, value in own.items() if value is not None}
        for role, own in eval_role_sampling(run).items()
    }


def stored_decision(run: Any, config: dict[str, Any]) -> dict[str, Any] | None:
    """The k an earlier attempt of this compute-matched run chose (None: not chosen yet)."""
    if not run.info_path.is_file():
        return None
    stored = run.info().config.get("compute_match") or {}
    if stored.get("run") != config["compute_match"]["run"] or not stored.get("suites"):
        return None
    return stored


def suite_epochs(
    suites: list[str], epochs: int, target: Any, decision: dict[str, Any] | None
) -> dict[str, int]:
    if target is None:
        return dict.fromkeys(suites, epochs)
    from harness.compute_match import epochs_of

    return epochs_of(decision, suites)


def then_choose_k(
    target: Any,
    run: Any,
    done: set[Any],
    missing: Callable[[dict[str, int]], list[Any]],
    suites: list[str],
) -> Callable[[], list[Any]]:
    """What runs after a compute-matched baseline's first epoch: choose k from its records,
    write it into run.json, and return the items of the other epochs."""

    def then() -> list[Any]:
        from harness.compute_match import decide, epochs_of, record_decision
        from harness.evaluation import record_key

        records = run.records()
        chosen = decide(target, records)
        record_decision(run, chosen)
        done.update(record_key(r) for r in records)  # an errored one is redone on resume
        return missing(epochs_of(chosen, suites))

    return then


def match_notes(target: Any, model: str, temperature: float | None) -> None:
    """What makes a matched baseline a weaker comparison, said once, not refused."""
    if target.model is not None and target.model != model:
        print(f"note: {target.path} ran the model {target.model}; this baseline runs {model}")
    if not temperature:
        print(
            "note: at temperature 0 a question's k samples may all be the same answer; a "
            "majority vote needs sampling (e.g. --temperature 0.7)"
        )


def recorded_keys(run: Any) -> set[tuple[str, str, int]]:
    """The keys of the error-free records already in the run (nothing is rewritten)."""
    from harness.evaluation import record_key

    keys: set[Any] = set()
    for record in run.records():
        if record.get("error"):
            continue
        try:
            keys.add(record_key(record))
        except (KeyError, TypeError, ValueError):
            continue
    return keys


def _usage_section(run_path: Path, key: str) -> dict[str, dict[str, Any]]:
    """One section of usage.json (added up over the run's attempts): name -> figures."""
    try:
        usage = json.loads((run_path / "usage.json").read_text())
    except (OSError, ValueError):
        return {}
    section = usage.get(key) if isinstance(usage, dict) else None
    if not isinstance(section, dict):
        return {}
    return {name: figures for name, figures in section.items() if isinstance(figures, dict)}


def _usage_by_role(run_path: Path) -> dict[str, Any]:
    """usage.json's per-role figures, for summary.json."""
    return {
        role: {
            key: round(value, 3) if key == "latency_s" and isinstance(value, float) else value
            for key, value in figures.items()
        }
        for role, figures in _usage_section(run_path, "roles").items()
    }


def _usage_by_replica(run_path: Path) -> dict[str, Any]:
    """usage.json's per-replica figures with each mean latency, for summary.json."""
    return {
        url: {
            **figures,
            "latency_s": round(float(figures.get("latency_s", 0.0)), 3),
            "mean_latency_s": round(
                float(figures.get("latency_s", 0.0)) / max(1, int(figures.get("calls", 0))), 4
            ),
        }
        for url, figures in _usage_section(run_path, "replicas").items()
    }


def finish_eval(life: Any, wall: float | None, cpu: float | None) -> list[str]:
    """Write the summary (each suite's data source from run.json) and the final status, unless
    the run already has it; return a line per suite without a score."""
    from core.runstore import RunStatus
    from harness.benchmarks.types import describe_origin
    from harness.evaluation import record_key, summarize
    from harness.report import print_summary_table
    from harness.unscored import unscored_suites

    run = life.run
    records = run.unique_records(record_key)
    summary = summarize(records, wall_s=wall)
    if cpu is not None:
        summary["client_cpu_s"] = round(cpu, 3)
    if run.malformed_lines:
        summary["malformed_lines"] = run.malformed_lines
    if run.duplicate_records:
        summary["duplicate_records"] = run.duplicate_records
    info = run.info()
    data = info.config.get("data") or {}
    sources = {
        suite: describe_origin(data[suite]["source"], data[suite].get("root"))
        for suite in summary["suites"]
        if isinstance(data.get(suite), dict) and data[suite].get("source")
    }
    for suite, origin in sources.items():
        summary["suites"][suite]["source"] = origin
    usage_by_role = _usage_by_role(run.path)
    if usage_by_role:
        summary["usage_by_role"] = usage_by_role
    replicas = _usage_by_replica(run.path)
    if replicas:
        summary["usage_by_replica"] = replicas
        for url, figures in replicas.items():
            print(
                f"replica {url}: {figures['calls']} calls, {figures['failures']} failed attempts, "
                f"mean latency {figures['mean_latency_s']:.3f} s"
            )
    decision = info.config.get("compute_match") or {}
    if decision.get("suites"):
        from harness.compute_match import match_lines, match_summary

        summary["compute_match"] = match_summary(decision, records)
        for line in match_lines(summary["compute_match"], summary["suites"]):
            print(line)
    run.write_summary(summary)
    errors = sum(s["errors"] for s in summary["suites"].values())
    unscored = unscored_suites(summary)
    if unscored and len(unscored) == len(summary["suites"]):
        status = RunStatus.FAILED  # nothing was scored
    else:
        status = RunStatus.after(errors)
    if info.status != status:
        life.finish(status)
    print_summary_table({run.path.name: summary}, sources=sources)
    print(f"run dir: {run.path}")
    return unscored
