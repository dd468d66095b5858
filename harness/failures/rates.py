"""Rates per MAST category and mode with Wilson intervals, and the comparison of two runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.stats import paired_bootstrap_diff, wilson_ci
from harness.failures.store import FAILURES_FILE, SCHEMA_VERSION, FailuresFile, has_key
from harness.failures.taxonomy import (
    CATEGORIES,
    CATEGORIES_BY_KEY,
    FAILURE_MODES,
    MODES_BY_ID,
)
from harness.failures.transcript import Key, record_key


def _rate(count: int, n: int) -> dict[str, Any]:
    low, high = wilson_ci(count, n)
    return {"count": count, "n": n, "rate": count / n if n else 0.0, "ci95": [low, high]}


def judged_verdicts(verdicts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One parsed verdict per key (the first): the denominator of every rate."""
    seen: dict[Key, dict[str, Any]] = {}
    for verdict in verdicts:
        if verdict.get("error") or not verdict.get("parsed"):
            continue
        try:
            seen.setdefault(record_key(verdict), verdict)
        except (KeyError, TypeError, ValueError):
            continue
    return list(seen.values())


def _modes_of(verdict: dict[str, Any]) -> set[str]:
    return {m for m in verdict.get("modes") or [] if m in MODES_BY_ID}


def _indicators(verdict: dict[str, Any]) -> dict[str, bool]:
    """Per mode id, per category key and 'any': does this verdict show it?"""
    modes = _modes_of(verdict)
    flags = {mode.id: mode.id in modes for mode in FAILURE_MODES}
    for category in CATEGORIES:
        flags[category.key] = any(MODES_BY_ID[m].category == category.key for m in modes)
    flags["any"] = bool(modes)
    return flags


def summarize_failures(verdicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rates over the parsed verdicts: a category counts when any of its modes is present."""
    judged = judged_verdicts(verdicts)
    n = len(judged)
    flags = [_indicators(v) for v in judged]
    keys = {record_key(v) for v in verdicts if has_key(v)}
    parse_failures = sum(
        1 for v in verdicts if not v.get("error") and not v.get("parsed") and has_key(v)
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "n_verdicts": len(keys),
        "n_judged": n,
        "parse_failures": parse_failures,
        "errors": sum(1 for v in verdicts if v.get("error")),
        "truncated": sum(1 for v in judged if v.get("truncated")),
        "judge_models": sorted({str(v.get("judge_model")) for v in judged}),
        "any_failure": _rate(sum(f["any"] for f in flags), n),
        "categories": {
            c.key: {"id": c.id, "name": c.name, **_rate(sum(f[c.key] for f in flags), n)}
            for c in CATEGORIES
        },
        "modes": {
            m.id: {"name": m.name, "category": m.category, **_rate(sum(f[m.id] for f in flags), n)}
            for m in FAILURE_MODES
        },
    }


def unpaired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean(b) - mean(a) for independent samples, with a percentile bootstrap 95% interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0:
        return (0.0, 0.0, 0.0)
    rng = np.random.default_rng(seed)
    boot_x = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    boot_y = y[rng.integers(0, y.size, size=(n_boot, y.size))].mean(axis=1)
    diffs = boot_y - boot_x
    return (
        float(y.mean() - x.mean()),
        float(np.quantile(diffs, 0.025)),
        float(np.quantile(diffs, 0.975)),
    )


def compare_failures(
    verdicts_a: Sequence[dict[str, Any]],
    verdicts_b: Sequence[dict[str, Any]],
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Rate of B minus rate of A per category, mode and 'any', with a bootstrap 95% interval.

    Paired (resampling shared transcripts) when both runs judged exactly the same keys, e.g. both
    analysed with `--all` on the same samples; otherwise unpaired (each run resampled on its
    own), which is the case for failed-only analyses of two checkpoints.
    """
    judged_a = {record_key(v): _indicators(v) for v in judged_verdicts(verdicts_a)}
    judged_b = {record_key(v): _indicators(v) for v in judged_verdicts(verdicts_b)}
    paired = bool(judged_a) and set(judged_a) == set(judged_b)
    shared = sorted(set(judged_a) & set(judged_b))

    def row(flag: str) -> dict[str, Any]:
        if paired:
            xs = [float(judged_a[k][flag]) for k in shared]
            ys = [float(judged_b[k][flag]) for k in shared]
            diff, low, high = paired_bootstrap_diff(xs, ys, n_boot=n_boot, seed=seed)
        else:
            xs = [float(f[flag]) for f in judged_a.values()]
            ys = [float(f[flag]) for f in judged_b.values()]
            diff, low, high = unpaired_bootstrap_diff(xs, ys, n_boot=n_boot, seed=seed)
        return {
            "rate_a": float(np.mean(xs)) if xs else 0.0,
            "rate_b": float(np.mean(ys)) if ys else 0.0,
            "diff": diff,
            "ci95": [low, high],
        }

    return {
        "method": "paired" if paired else "unpaired",
        "n_a": len(judged_a),
        "n_b": len(judged_b),
        "n_shared": len(shared),
        "any_failure": row("any"),
        "categories": {c.key: {"id": c.id, "name": c.name, **row(c.key)} for c in CATEGORIES},
        "modes": {m.id: {"name": m.name, **row(m.id)} for m in FAILURE_MODES},
    }


def load_failures(run_path: Path) -> tuple[list[dict[str, Any]], int]:
    """The verdicts of a run directory and the number of malformed lines skipped."""
    file = FailuresFile(Path(run_path) / FAILURES_FILE)
    verdicts = file.records()
    return verdicts, file.malformed_lines


def category_name(key: str) -> str:
    category = CATEGORIES_BY_KEY.get(key)
    return category.name if category else key
