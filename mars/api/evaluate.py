"""`mars.evaluate`: reasoning suites through a multi-agent system, resumable, with a summary.

`mars eval` parses its options into an `EvalPlan` and calls `evaluate`; a notebook calls it
directly. Everything is checked before a server starts or a file changes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions
from mars.api.plans import build_plan, names
from mars.api.results import RunResult, eval_figures, finished_run


@dataclasses.dataclass(frozen=True)
class EvalPlan:
    """What `mars eval` runs. `roles` maps a role to (base URL, model name) or to
    "MODEL@URL"; `role_sampling` a role to its own generation settings; `mas_options` are the
    workflow's settings (`rounds=2`)."""

    suites: str | Sequence[str]
    mas: str | None = None
    roles: dict[str, Any] | Sequence[str] = dataclasses.field(default_factory=dict)
    role_sampling: dict[str, dict[str, Any]] | Sequence[str] = dataclasses.field(
        default_factory=dict
    )
    mas_options: dict[str, Any] | Sequence[str] = dataclasses.field(default_factory=dict)
    grader: str = "rules"
    judge_temperature: float = 0.5
    judge_max_tokens: int = 2048
    limit: int | None = None
    epochs: int | None = None
    match_compute: Path | None = None
    data_dir: Path | None = None
    model_options: ModelOptions = dataclasses.field(default_factory=ModelOptions)
    sampling: SamplingOptions = dataclasses.field(default_factory=SamplingOptions)
    out: Path = Path("runs")
    run_dir: Path | None = None
    quiet: bool = False
    trained: Path | None = None
    trained_step: int | None = None


@dataclasses.dataclass
class _Prepared:
    """An EvalPlan checked and resolved: what the run needs, nothing started yet."""

    plan: EvalPlan
    suite_names: list[str]
    suites: list[Any]
    loaded: list[Any]
    mas_name: str
    mas_function: Any
    mas_config: dict[str, Any]
    model_options: ModelOptions
    role_targets: dict[str, tuple[str, str]]
    role_models: dict[str, str]
    role_adapters: dict[str, tuple[str, str]]
    gen: Any
    gen_by_role: dict[str, Any]
    grading: Any
    target: Any
    epochs: int
    config: dict[str, Any] = dataclasses.field(default_factory=dict)


def evaluate(plan: EvalPlan | None = None, /, **kwargs: Any) -> RunResult:
    """Run `plan` (or the plan the keyword arguments build) and return its result. A rerun
    with the same run folder resumes; a finished one returns its summary at once."""
    plan = build_plan(EvalPlan, plan, kwargs)
    prepared = _prepare(plan)
    from core.lifecycle import run_lifecycle
    from core.runstore import model_identity
    from harness.evaluation import eval_identity, record_key

    options = prepared.model_options
    identity = eval_identity(prepared.config, model_identity(options.model, options.base_url))
    # Refused on entering, before a server starts or a file changes, when the settings differ.
    with (
        run_lifecycle(
            out=plan.out,
            run_dir=plan.run_dir,
            kind="eval",
            slug=f"{prepared.mas_name}-{','.join(prepared.suite_names)}",
            identity=identity,
            complete="model" in identity,
        ) as life,
        ExitStack() as servers,
    ):
        unscored = _run(prepared, life, servers, identity)
    return finished_run(life, "eval", {}, eval_figures, unscored, record_key)


def _prepare(plan: EvalPlan) -> _Prepared:
    """Every check `mars eval` makes before it starts anything, and the run's config."""
    import asyncio

    from harness.benchmarks import get_suite
    from harness.benchmarks.sources import check_data_dir
    from harness.graders import GradingPlan
    from mars.api.eval_steps import shared_adapters, trained_models, trained_sampling
    from mars.api.inputs import parse_mas_options, parse_role_mapping, parse_role_sampling
    from mas.base import check_options, check_task_kinds, get_mas

    suite_names = list(names(plan.suites, "--suite"))
    if not suite_names:
        raise MarsError("--suite needs at least one suite name")
    suites = [get_suite(name) for name in suite_names]
    if plan.data_dir is not None:
        check_data_dir(plan.data_dir)  # missing or empty: one line, never another root instead
    role_targets = _role_targets(plan.roles, parse_role_mapping)
    role_settings = _role_settings(plan.role_sampling, parse_role_sampling)
    if isinstance(plan.mas_options, dict):
        mas_config = dict(plan.mas_options)
    else:  # `KEY=VALUE` items, as --mas-option gives them
        mas_config = parse_mas_options(list(plan.mas_options))
    if plan.epochs is not None and plan.epochs < 1:
        raise MarsError(f"--epochs must be at least 1, not {plan.epochs}")
    mas_name, model_options = plan.mas, plan.model_options
    role_models: dict[str, str] = {}  # role -> a local model folder served for it alone
    # role -> (adapter name, folder): a LoRA adapter served beside the default model's adapter
    role_adapters: dict[str, tuple[str, str]] = {}
    trained_config: dict[str, Any] = {}
    if plan.trained is not None:
        mas_name, model, role_models, mas_config, trained_config = trained_models(
            plan.trained, plan.trained_step, mas_name, model_options, role_targets, mas_config
        )
        role_settings = trained_sampling(plan.trained) | role_settings  # the flags win
        model_options = dataclasses.replace(model_options, model=model)
        role_adapters = shared_adapters(model, role_models)
    elif plan.trained_step is not None:
        raise MarsError("--trained-step needs --trained RUN")
    mas_name = mas_name or "single"
    target = _compute_target(plan, mas_name, suite_names)
    mas_function = get_mas(mas_name)
    asyncio.run(check_options(mas_function, mas_config, name=mas_name))  # one line, no samples
    grading = GradingPlan.from_options(plan.grader, plan.judge_temperature, plan.judge_max_tokens)
    check_task_kinds(mas_name, {s.name: s.kind for s in suites})
    ruled = sorted(s.name for s in suites if s.kind in ("puzzle", "code"))
    if grading.settings is not None and ruled:
        raise MarsError(
            f"--grader judge cannot grade {', '.join(ruled)}: a puzzle is graded by playing the "
            "answer, a program by running the tests"
        )
    loaded = _load_suites(suites, plan)
    if target is not None:
        from harness.compute_match import check_versions

        check_versions(target, {r.suite: r.version for r in loaded})
    gen = plan.sampling.generation()
    prepared = _Prepared(
        plan=plan,
        suite_names=suite_names,
        suites=suites,
        loaded=loaded,
        mas_name=mas_name,
        mas_function=mas_function,
        mas_config=mas_config,
        model_options=model_options,
        role_targets=role_targets,
        role_models=role_models,
        role_adapters=role_adapters,
        gen=gen,
        gen_by_role={role: gen.model_copy(update=own) for role, own in role_settings.items()},
        grading=grading,
        target=target,
        epochs=plan.epochs or 1,
    )
    prepared.config = _config(prepared, trained_config)
    return prepared


def _role_targets(
    roles: dict[str, Any] | Sequence[str], parse: Callable[[list[str]], Any]
) -> dict[str, tuple[str, str]]:
    """`--role` values, or a dict of role -> (URL, model) or "MODEL@URL"."""
    if not isinstance(roles, dict):
        return parse(list(roles))
    lines = [
        f"{role}={target[1]}@{target[0]}"
        if isinstance(target, tuple | list)
        else f"{role}={target}"
        for role, target in roles.items()
    ]
    return parse(lines)


def _role_settings(
    settings: dict[str, dict[str, Any]] | Sequence[str], parse: Callable[[list[str]], Any]
) -> dict[str, dict[str, Any]]:
    """`--role-sampling` values, or a dict of role -> settings (checked the same way)."""
    if not isinstance(settings, dict):
        return parse(list(settings))
    from mars.api.inputs import checked_role_settings

    return {role: checked_role_settings(role, own) for role, own in settings.items()}


def _compute_target(plan: EvalPlan, mas_name: str, suite_names: list[str]) -> Any:
    """The MAS run a compute-matched baseline matches (None without --match-compute)."""
    if plan.match_compute is None:
        return None
    from harness.compute_match import load_target

    if mas_name != "single":
        raise MarsError(f"--match-compute runs the single agent, not --mas {mas_name}")
    if plan.epochs is not None:
        raise MarsError("--match-compute chooses the epochs (k) itself: leave out --epochs")
    return load_target(plan.match_compute, suites=suite_names, limit=plan.limit)


def _load_suites(suites: list[Any], plan: EvalPlan) -> list[Any]:
    loaded = []
    for suite in suites:
        result = suite.load(data_dir=plan.data_dir, limit=plan.limit)
        if not result.samples:
            raise MarsError(f"suite {suite.name} has no usable samples in {result.source}")
        skipped = f"; skipped {result.skipped} malformed rows" if result.skipped else ""
        print(f"{suite.name}: {len(result.samples)} samples from {result.origin}{skipped}")
        loaded.append(result)
    return loaded


def _config(p: _Prepared, trained_config: dict[str, Any]) -> dict[str, Any]:
    """run.json's config: everything that decides what a record means."""
    from core.fingerprints import model_fingerprint

    by_role = p.gen_by_role
    return {
        "suites": p.suite_names,
        "mas": p.mas_name,
        "limit": p.plan.limit,
        "epochs": p.epochs,
        "concurrency": p.model_options.concurrency,
        "generation": p.gen.model_dump(),
        **(
            {"generation_by_role": {r: g.model_dump() for r, g in by_role.items()}}
            if by_role
            else {}
        ),
        "mas_config": p.mas_config,
        "roles": {r: {"base_url": b, "model": m} for r, (b, m) in p.role_targets.items()}
        | {
            r: {"model": path, "fingerprint": model_fingerprint(path)}
            for r, path in p.role_models.items()
        }
        | {
            r: {"model": path, "fingerprint": model_fingerprint(path)}
            for r, (_name, path) in p.role_adapters.items()
        },
        **trained_config,
        "data": {
            r.suite: {"source": r.source, "root": r.root, "version": r.version} for r in p.loaded
        },
        **p.grading.config(),
        **({"compute_match": _base_config(p.target)} if p.target is not None else {}),
    }


def _base_config(target: Any) -> dict[str, Any]:
    from harness.compute_match import base_config

    return base_config(target)


def _run(p: _Prepared, life: Any, servers: ExitStack, identity: dict[str, Any]) -> list[str]:
    """Inside the run's lifecycle: skip a finished run, else serve, solve and summarise."""
    import asyncio

    from mars.api import eval_steps as steps

    decision = steps.stored_decision(life.run, p.config) if p.target is not None else None
    if decision is not None:  # k was chosen by an earlier attempt: kept
        p.config |= {
            "compute_match": decision,
            "epochs": max(s["k"] for s in decision["suites"].values()),
        }
    suite_epochs = steps.suite_epochs(p.suite_names, p.epochs, p.target, decision)
    wanted = {
        (s.name, sample.id, epoch)
        for s, result in zip(p.suites, p.loaded, strict=True)
        for epoch in range(suite_epochs[s.name])
        for sample in result.samples
    }
    if (
        life.run.info_path.is_file()
        and (p.target is None or decision is not None)
        and wanted <= steps.recorded_keys(life.run)
    ):
        # A finished run asked again: its summary, and no model server started for nothing.
        print(f"nothing to run: all {len(wanted)} attempts are recorded in {life.path}")
        previous = life.run.summary() or {}
        return steps.finish_eval(life, previous.get("wall_s"), previous.get("client_cpu_s"))
    endpoint_config, role_configs = _open_endpoints(p, life, servers)
    if "model" not in identity:  # the server named the model: check it too
        life.check({**identity, "model": endpoint_config.model})
    from harness.evaluation import record_key

    done = life.resume(record_key)
    missing = _missing(p, done)
    items = missing(suite_epochs)
    if done:
        print(f"resuming {life.path}: {len(done)} records kept, {len(items)} to run")
    life.start(
        config=p.config,
        model=endpoint_config.model,
        endpoint=endpoint_config.public(),
        seeds={"seed": p.plan.sampling.seed},
    )
    then = None
    if p.target is not None:
        steps.match_notes(p.target, endpoint_config.model, p.gen.temperature)
        if decision is None:  # the first epoch measures a sample; then k, the rest
            then = steps.then_choose_k(p.target, life.run, done, missing, p.suite_names)
    started, cpu_started = time.perf_counter(), time.process_time()
    work = steps.EvalWork(
        mas_function=p.mas_function,
        mas_config=p.mas_config,
        endpoint_config=endpoint_config,
        role_configs=role_configs,
        gen=p.gen,
        gen_by_role=p.gen_by_role,
        grading=p.grading,
        quiet=p.plan.quiet,
    )
    asyncio.run(steps.solve_items(items, work, life.run, then))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return steps.finish_eval(life, wall, cpu)


def _open_endpoints(p: _Prepared, life: Any, servers: ExitStack) -> tuple[Any, dict[str, Any]]:
    """The default endpoint (a server started when there is no URL) and one per mapped role."""
    from core.model_access import adapter_endpoint
    from core.model_options import open_endpoint

    endpoint_config = servers.enter_context(
        open_endpoint(
            p.model_options,
            life.run,
            p.gen,
            extra_sampling=[
                *p.grading.extra_sampling(p.role_targets),
                *p.gen_by_role.values(),
            ],
            adapters=dict(p.role_adapters.values()),
        )
    )
    role_configs = {
        name: endpoint_config.model_copy(
            update={"base_url": url, "model": model_name, "model_identity": None}
        )
        for name, (url, model_name) in p.role_targets.items()
    }
    for name, (adapter, path) in p.role_adapters.items():  # on the default's server
        role_configs[name] = adapter_endpoint(endpoint_config, adapter, path)
    for name, path in p.role_models.items():  # a local checkpoint per role: its own server
        role_options = dataclasses.replace(p.model_options, model=path, base_url=None)
        role_configs[name] = servers.enter_context(
            open_endpoint(role_options, life.path / f"role-{name}", p.gen)
        )
    return endpoint_config, role_configs


def _missing(p: _Prepared, done: set[Any]) -> Callable[[dict[str, int]], list[Any]]:
    from harness.evaluation import WorkItem

    def missing(suite_epochs: dict[str, int]) -> list[Any]:
        return [
            WorkItem(suite=s, sample=sample, epoch=epoch)
            for s, result in zip(p.suites, p.loaded, strict=True)
            for epoch in range(suite_epochs[s.name])
            for sample in result.samples
            if (s.name, sample.id, epoch) not in done
        ]

    return missing
