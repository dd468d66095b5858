"""`mars eval`: reasoning suites through a multi-agent system, resumable, with a summary."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from core.errors import MarsError
from core.model_options import ModelOptions, SamplingOptions
from core.names import comma_list
from mars.commands import options
from mars.commands.app import app
from mars.commands.model_options import model_options
from mars.commands.options import parse_role_mapping, parse_role_sampling


def parse_mas_options(values: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; values are read as JSON when they parse (2, true, 0.5), else as text."""
    config: dict[str, Any] = {}
    for value in values:
        key, sep, raw = value.partition("=")
        if not sep or not key.strip():
            raise MarsError(f"--mas-option expects KEY=VALUE, got '{value}'")
        try:
            config[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            config[key.strip()] = raw
    return config


@app.command("eval")
@model_options()
def eval_command(
    suite: str = typer.Option(..., "--suite", help="Comma-separated suites, e.g. gsm8k,math500."),
    mas_name: str | None = typer.Option(
        None, "--mas", help="Multi-agent system: single, mad, ... (default: single)"
    ),
    role: list[str] = options.ROLE,
    role_sampling: list[str] = options.ROLE_SAMPLING,
    mas_option: list[str] = typer.Option(
        [], "--mas-option", help="A MAS setting KEY=VALUE, e.g. rounds=2 (repeatable)."
    ),
    grader: str = options.GRADER,
    judge_temperature: float = options.JUDGE_TEMPERATURE,
    judge_max_tokens: int = options.JUDGE_MAX_TOKENS,
    limit: int = typer.Option(None, "--limit", help="First N samples of each suite."),
    epochs: int = typer.Option(None, "--epochs", min=1, help="Attempts per sample (default 1)."),
    match_compute: Path = typer.Option(
        None,
        "--match-compute",
        help="A MAS eval run of the same suites and limit: run the single agent with a majority "
        "vote over k samples per question, k chosen so its tokens per question (prompt + "
        "completion) match that run's.",
    ),
    data_dir: Path = typer.Option(None, "--data-dir", help="Local benchmark files."),
    model_options: ModelOptions = ModelOptions(),
    sampling: SamplingOptions = SamplingOptions(),
    out: Path = options.OUT,
    run_dir: Path = options.RUN_DIR,
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    trained: Path = typer.Option(
        None,
        "--trained",
        help="A `mars train-mas` run: each role answered by its own policy's checkpoint, the "
        "workflow and its options as trained.",
    ),
    trained_step: int = typer.Option(
        None, "--trained-step", help="With --trained: the checkpoints of this step (default: last)."
    ),
) -> None:
    """Run reasoning suites through a MAS and grade every answer."""
    import asyncio

    from core.lifecycle import run_lifecycle
    from core.runstore import model_identity
    from core.servers import model_fingerprint
    from harness.benchmarks import get_suite
    from harness.benchmarks.sources import check_data_dir
    from harness.evaluation import WorkItem, eval_identity, record_key
    from harness.unscored import exit_if_unscored
    from mas.base import check_options, check_task_kinds, get_mas

    suite_names = comma_list(suite, "--suite")
    if not suite_names:
        raise MarsError("--suite needs at least one suite name")
    suites = [get_suite(name) for name in suite_names]
    if data_dir is not None:
        check_data_dir(data_dir)  # missing or empty: one line, never another root instead
    role_targets = parse_role_mapping(role)
    role_settings = parse_role_sampling(role_sampling)
    mas_config = parse_mas_options(mas_option)
    role_models: dict[str, str] = {}  # role -> a local model folder served for it alone
    # role -> (adapter name, folder): a LoRA adapter served beside the default model's adapter
    role_adapters: dict[str, tuple[str, str]] = {}
    trained_config: dict[str, Any] = {}
    if trained is not None:
        mas_name, model, role_models, mas_config, trained_config = _trained_models(
            trained, trained_step, mas_name, model_options, role_targets, mas_config
        )
        role_settings = _trained_sampling(trained) | role_settings  # the flags win
        model_options = dataclasses.replace(model_options, model=model)
        role_adapters = _shared_adapters(model, role_models)
    elif trained_step is not None:
        raise MarsError("--trained-step needs --trained RUN")
    mas_name = mas_name or "single"
    target = None
    if match_compute is not None:
        from harness.compute_match import load_target

        if mas_name != "single":
            raise MarsError(f"--match-compute runs the single agent, not --mas {mas_name}")
        if epochs is not None:
            raise MarsError("--match-compute chooses the epochs (k) itself: leave out --epochs")
        target = load_target(match_compute, suites=suite_names, limit=limit)
    epochs = epochs or 1
    mas_function = get_mas(mas_name)
    asyncio.run(check_options(mas_function, mas_config, name=mas_name))  # one line, no samples
    from harness.graders import GradingPlan

    grading = GradingPlan.from_options(grader, judge_temperature, judge_max_tokens)
    check_task_kinds(mas_name, {s.name: s.kind for s in suites})
    ruled = sorted(s.name for s in suites if s.kind in ("puzzle", "code"))
    if grading.settings is not None and ruled:
        raise MarsError(
            f"--grader judge cannot grade {', '.join(ruled)}: a puzzle is graded by playing the "
            "answer, a program by running the tests"
        )
    loaded = []
    for s in suites:
        result = s.load(data_dir=data_dir, limit=limit)
        if not result.samples:
            raise MarsError(f"suite {s.name} has no usable samples in {result.source}")
        skipped = f"; skipped {result.skipped} malformed rows" if result.skipped else ""
        print(f"{s.name}: {len(result.samples)} samples from {result.origin}{skipped}")
        loaded.append(result)
    if target is not None:
        from harness.compute_match import base_config, check_versions

        check_versions(target, {r.suite: r.version for r in loaded})

    gen = sampling.generation()
    gen_by_role = {role: gen.model_copy(update=own) for role, own in role_settings.items()}
    config: dict[str, Any] = {
        "suites": suite_names,
        "mas": mas_name,
        "limit": limit,
        "epochs": epochs,
        "concurrency": model_options.concurrency,
        "generation": gen.model_dump(),
        **(
            {"generation_by_role": {r: g.model_dump() for r, g in gen_by_role.items()}}
            if gen_by_role
            else {}
        ),
        "mas_config": mas_config,
        "roles": {r: {"base_url": b, "model": m} for r, (b, m) in role_targets.items()}
        | {
            r: {"model": path, "fingerprint": model_fingerprint(path)}
            for r, path in role_models.items()
        }
        | {
            r: {"model": path, "fingerprint": model_fingerprint(path)}
            for r, (_name, path) in role_adapters.items()
        },
        **trained_config,
        "data": {
            r.suite: {"source": r.source, "root": r.root, "version": r.version} for r in loaded
        },
        **grading.config(),
        **({"compute_match": base_config(target)} if target is not None else {}),
    }
    identity = eval_identity(config, model_identity(model_options.model, model_options.base_url))
    from contextlib import ExitStack

    from core.model_access import adapter_endpoint
    from core.model_options import open_endpoint

    # Refused on entering, before a server starts or a file changes, when the settings differ.
    with (
        run_lifecycle(
            out=out,
            run_dir=run_dir,
            kind="eval",
            slug=f"{mas_name}-{suite}",
            identity=identity,
            complete="model" in identity,
        ) as life,
        ExitStack() as servers,
    ):
        decision = _stored_decision(life.run, config) if target is not None else None
        if decision is not None:  # k was chosen by an earlier attempt: kept
            config |= {
                "compute_match": decision,
                "epochs": max(s["k"] for s in decision["suites"].values()),
            }
        suite_epochs = _suite_epochs(suite_names, epochs, target, decision)
        wanted = {
            (s.name, sample.id, epoch)
            for s, result in zip(suites, loaded, strict=True)
            for epoch in range(suite_epochs[s.name])
            for sample in result.samples
        }
        if (
            life.run.info_path.is_file()
            and (target is None or decision is not None)
            and wanted <= _recorded_keys(life.run)
        ):
            # A finished run asked again: its summary, and no model server started for nothing.
            print(f"nothing to run: all {len(wanted)} attempts are recorded in {life.path}")
            previous = life.run.summary() or {}
            unscored = _finish_eval(life, previous.get("wall_s"), previous.get("client_cpu_s"))
        else:
            endpoint_config = servers.enter_context(
                open_endpoint(
                    model_options,
                    life.run,
                    gen,
                    extra_sampling=[
                        *grading.extra_sampling(role_targets),
                        *gen_by_role.values(),
                    ],
                    adapters=dict(role_adapters.values()),
                )
            )
            role_configs = {
                name: endpoint_config.model_copy(
                    update={"base_url": url, "model": model_name, "model_identity": None}
                )
                for name, (url, model_name) in role_targets.items()
            }
            for name, (adapter, path) in role_adapters.items():  # on the default's server
                role_configs[name] = adapter_endpoint(endpoint_config, adapter, path)
            for name, path in role_models.items():  # a local checkpoint per role: its own server
                role_options = dataclasses.replace(model_options, model=path, base_url=None)
                role_configs[name] = servers.enter_context(
                    open_endpoint(role_options, life.path / f"role-{name}", gen)
                )
            if "model" not in identity:  # the server named the model: check it too
                life.check({**identity, "model": endpoint_config.model})
            done = life.resume(record_key)

            def missing(suite_epochs: dict[str, int]) -> list[WorkItem]:
                return [
                    WorkItem(suite=s, sample=sample, epoch=epoch)
                    for s, result in zip(suites, loaded, strict=True)
                    for epoch in range(suite_epochs[s.name])
                    for sample in result.samples
                    if (s.name, sample.id, epoch) not in done
                ]

            items = missing(suite_epochs)
            if done:
                print(f"resuming {life.path}: {len(done)} records kept, {len(items)} to run")
            life.start(
                config=config,
                model=endpoint_config.model,
                endpoint=endpoint_config.public(),
                seeds={"seed": sampling.seed},
            )
            then: Callable[[], list[Any]] | None = None
            if target is not None:
                _match_notes(target, endpoint_config.model, gen.temperature)
                if decision is None:  # the first epoch measures a sample; then k, the rest
                    then = _then_choose_k(target, life.run, done, missing, suite_names)

            started, cpu_started = time.perf_counter(), time.process_time()
            asyncio.run(
                _evaluate(
                    items,
                    mas_function,
                    mas_config,
                    endpoint_config,
                    role_configs,
                    gen,
                    life.run,
                    quiet,
                    grading,
                    gen_by_role,
                    then,
                )
            )
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            unscored = _finish_eval(life, wall, cpu)
    exit_if_unscored(unscored)


async def _evaluate(
    items: list[Any],
    mas_function: Any,
    mas_config: dict[str, Any],
    endpoint_config: Any,
    role_configs: dict[str, Any],
    gen: Any,
    run: Any,
    quiet: bool,
    grading: Any,
    gen_by_role: dict[str, Any],
    then: Callable[[], list[Any]] | None = None,
) -> None:
    """Solve and record `items`; then those `then()` returns (the epochs of a compute-matched
    baseline after its first), on the same endpoints."""
    from core.endpoint import Endpoint
    from core.usage import accumulate_usage_file
    from harness.evaluation import SolvedSample, WorkItem, run_items
    from mas.base import Models, Task

    default = Endpoint(endpoint_config)
    by_role = {name: Endpoint(config) for name, config in role_configs.items()}
    models = Models(default=default, by_role=by_role, gen=gen, gen_by_role=gen_by_role)

    async def solve(item: WorkItem) -> SolvedSample:
        task = Task(
            prompt=item.prompt,
            sample_id=item.sample.id,
            suite=item.suite.name,
            epoch=item.epoch,
            kind=item.suite.kind,
            metadata=_task_metadata(item.sample.metadata),
        )
        transcript = await mas_function(task, models, mas_config)
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
            workers=endpoint_config.concurrency * 2,
            show_progress=not quiet,
            grader=grading.grader(models.for_role),
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


def _shared_adapters(default: str, role_models: dict[str, str]) -> dict[str, tuple[str, str]]:
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


def _trained_models(
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


def _trained_sampling(run: Path) -> dict[str, dict[str, Any]]:
    """The run's `eval_role_sampling`, as `--role-sampling` settings (its max_new_tokens is
    max_tokens); the unset fields stay the command's own."""
    from train_backend.mas.trained import eval_role_sampling

    renamed = {"max_new_tokens": "max_tokens"}
    return {
        role: {renamed.get(key, key): value for key, value in own.items() if value is not None}
        for role, own in eval_role_sampling(run).items()
    }


def _stored_decision(run: Any, config: dict[str, Any]) -> dict[str, Any] | None:
    """The k an earlier attempt of this compute-matched run chose (None: not chosen yet)."""
    if not run.info_path.is_file():
        return None
    stored = run.info().config.get("compute_match") or {}
    if stored.get("run") != config["compute_match"]["run"] or not stored.get("suites"):
        return None
    return stored


def _suite_epochs(
    suites: list[str], epochs: int, target: Any, decision: dict[str, Any] | None
) -> dict[str, int]:
    if target is None:
        return dict.fromkeys(suites, epochs)
    from harness.compute_match import epochs_of

    return epochs_of(decision, suites)


def _then_choose_k(
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


def _match_notes(target: Any, model: str, temperature: float | None) -> None:
    """What makes a matched baseline a weaker comparison, said once, not refused."""
    if target.model is not None and target.model != model:
        print(f"note: {target.path} ran the model {target.model}; this baseline runs {model}")
    if not temperature:
        print(
            "note: at temperature 0 a question's k samples may all be the same answer; a "
            "majority vote needs sampling (e.g. --temperature 0.7)"
        )


def _recorded_keys(run: Any) -> set[tuple[str, str, int]]:
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


def _finish_eval(life: Any, wall: float | None, cpu: float | None) -> list[str]:
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
