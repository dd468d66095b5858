"""The report's tables that read one kind of part each: MAST failure rates (failures parts)
and the ablation arms (loop parts, one checkpoint each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import MarsError
from mars.orchestration.experiments import papers
from mars.orchestration.experiments.figures import curve, start_and_last
from mars.orchestration.experiments.report_text import md_table, value_text
from mars.orchestration.experiments.spec import Experiment


def failure_table(experiment: Experiment, root: Path) -> tuple[list[str], list[str]]:
    """MAST failure rates before and after, per category (with the paper's where it measured
    the same suite and MAS); and a line for each row whose judge parsed no verdict."""
    from harness.failures.rates import compare_failures, load_failures, summarize_failures

    rows, limits = [], []
    for row in experiment.report.failures:
        dirs = [
            _failures_dir(experiment, root, row.before),
            _failures_dir(experiment, root, row.after),
        ]
        if None in dirs:
            continue
        verdicts = [load_failures(d)[0] for d in dirs]  # type: ignore[arg-type]
        summaries = [summarize_failures(v) for v in verdicts]
        if not all(s["n_judged"] for s in summaries):
            judged = " and ".join(str(s["n_judged"]) for s in summaries)
            limits.append(
                f"MAST failures ({row.label}): the judge gave {judged} parsed verdicts "
                "(before, after); no failure rates without them."
            )
            continue
        compared = compare_failures(verdicts[0], verdicts[1])
        same_as_paper = experiment.paper == "marshal" and _suite_and_mas(dirs[1]) == (
            papers.MARSHAL_FAILURES_ON
        )
        for key, entry in compared["categories"].items():
            a, b = (s["categories"][key] for s in summaries)
            paper = papers.MARSHAL_FAILURES.get(key) if same_as_paper else None
            low, high = entry["ci95"]
            rows.append([
                row.label, f"{entry['id']} {entry['name']}",
                value_text(a["rate"], a["ci95"], 0, 100) + f" (n={a['n']})",
                value_text(b["rate"], b["ci95"], 0, 100) + f" (n={b['n']})",
                f"{100 * entry['diff']:+.0f} [{100 * low:+.0f}, {100 * high:+.0f}]"
                f" ({compared['method']})",
                f"{paper.text()} ({paper.source})" if paper else "",
            ])  # fmt: skip
    header = ["MAS", "category", "before", "after", "change, pp [95%]", "paper"]
    return md_table(header, rows), limits


def _failures_dir(experiment: Experiment, root: Path, part_name: str) -> Path | None:
    from mars.orchestration.experiments.parts import resolve_parts

    part = experiment.part(part_name)
    for item in resolve_parts(experiment, root, build=False):
        if item.part.name == part.name:
            target = Path(item.argv[1])
            return target if (target / "failures_summary.json").is_file() else None
    return None


def ablation_table(experiment: Experiment, root: Path) -> list[str]:
    """Each arm's figures at its checkpoint (and Stronger-MAS's figure of the matching arm)."""
    arms = experiment.report.ablations
    model = str(experiment.vars.get("model", ""))
    if not arms:
        return []
    columns: dict[str, str] = {}
    cells: list[dict[str, str]] = []
    for arm in arms:
        start, last = start_and_last(curve(root / arm.part))
        row = start if arm.step == "start" else last
        figures: dict[str, str] = {}
        for key, entry in (row or {}).get("evals", {}).items():
            text = _figure(entry)
            if text:
                figures[key] = text
                columns.setdefault(key, key)
        if row is not None and arm.step != "start":
            figures["_step"] = str(row["step"])
        if arm.paper_arm and experiment.paper == "stronger_mas":
            for key, entry in (row or {}).get("evals", {}).items():
                value = papers.stronger_mas_figure(model, entry.get("suite", ""), arm.paper_arm)
                if value is not None:
                    figures[f"paper:{key}"] = f"{value:g}"
                    columns.setdefault(
                        f"paper:{key}", f"paper {entry['suite']} ({papers.STRONGER_MAS_SOURCE})"
                    )
        cells.append(figures)
    header = ["arm", "checkpoint", *columns.values()]
    rows = []
    for arm, figures in zip(arms, cells, strict=True):
        where = "start" if arm.step == "start" else f"step {figures.get('_step', '?')}"
        rows.append([arm.label, where, *(figures.get(k, "") for k in columns)])
    return md_table(header, rows)


def run_config(run_dir: Path) -> dict[str, Any]:
    """A run's stored config ({} when its run.json cannot be read)."""
    from core.runstore import RunDir

    try:
        return RunDir.read_info(run_dir).config
    except MarsError:
        return {}


def _suite_and_mas(eval_dir: Path) -> tuple[str, str] | None:
    """An eval run's one suite and its MAS (None: several suites, or no readable run.json)."""
    config = run_config(eval_dir)
    suites = config.get("suites") or []
    return (suites[0], config.get("mas", "single")) if len(suites) == 1 else None


def _figure(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return "error"
    if entry["kind"] == "arena":
        seats = entry.get("seats", {})
        return " / ".join(
            f"{s['normalized_return']:.1f}"
            for s in seats.values()
            if s.get("normalized_return") is not None
        )
    if entry["kind"] == "exploit" and entry.get("exploitability") is not None:
        return value_text(entry["exploitability"], entry["ci95"], 3)
    if entry["kind"] == "eval" and entry.get("accuracy") is not None:
        return value_text(entry["accuracy"], entry.get("ci95"), scale=100)
    return ""
