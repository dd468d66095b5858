"""The Kuhn ablation table: every arm over its seeds, and which pairs of arms differ.

Reads the per-run figures that `bench/selfplay_ablation.py` writes (`ROOT/<arm>-seed<N>/
figures.json`), from one or more bench roots, plus single runs measured elsewhere with the same
budget (`--add arm:seed:path/to/figures.json`, e.g. a configuration trained by hand and measured
with `selfplay_ablation.py --measure`). Prints one row per arm (the seeds' exploitabilities, their
mean and a 95% t interval over seeds), the pairs of arms whose means differ (Welch's t-test over
seeds, Holm-corrected over all pairs at 0.05), each arm against a reference arm (Holm over those
comparisons), the pairs whose intervals over seeds are apart (descriptive), and a last JSON line.

Run: .venv/bin/python bench/ablation_table.py ROOT [ROOT ...] [--add arm:seed:figures.json ...]
     [--start figures.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

RUN_DIR = re.compile(r"^(?P<arm>.+)-seed(?P<seed>\d+)$")
ALPHA = 0.05


def collect(roots: list[Path], added: list[str]) -> dict[str, dict[int, float]]:
    """arm -> seed -> Kuhn exploitability of the run's last checkpoint."""
    table: dict[str, dict[int, float]] = {}
    for root in roots:
        for figures in sorted(root.glob("*-seed*/figures.json")):
            match = RUN_DIR.match(figures.parent.name)
            if match:
                seeds = table.setdefault(match["arm"], {})
                seeds[int(match["seed"])] = _exploitability(figures)
    for item in added:
        arm, seed, path = item.split(":", 2)
        table.setdefault(arm, {})[int(seed)] = _exploitability(Path(path))
    return table


def _exploitability(figures: Path) -> float:
    return float(json.loads(figures.read_text())["kuhn"]["exploitability"])


def t_interval(values: list[float]) -> tuple[float, float]:
    """95% Student-t interval of the mean over seeds (a point when there is one seed)."""
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if data.size < 2:
        return mean, mean
    half = float(stats.t.ppf(0.975, data.size - 1) * data.std(ddof=1) / np.sqrt(data.size))
    return mean - half, mean + half


def welch(table: dict[str, dict[int, float]], a: str, b: str) -> dict[str, Any]:
    """Welch's t-test of two arms' seeds: which is lower, and the two-sided p-value."""
    x, y = list(table[a].values()), list(table[b].values())
    p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
    lower, higher = (a, b) if np.mean(x) < np.mean(y) else (b, a)
    return {"lower": lower, "higher": higher, "p": p}


def holm(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tests Holm's step-down procedure rejects at ALPHA (the family: `tests`)."""
    ordered = sorted(tests, key=lambda test: test["p"])
    rejected = []
    for rank, test in enumerate(ordered):
        if test["p"] * (len(ordered) - rank) > ALPHA:
            break  # stop at the first test that fails its threshold
        rejected.append(test)
    return rejected


def significant_pairs(table: dict[str, dict[int, float]]) -> list[dict[str, Any]]:
    """Pairs of arms (each with >= 2 seeds) whose mean exploitability differs: Welch's t-test,
    Holm's correction over every pair."""
    arms = [arm for arm, seeds in table.items() if len(seeds) >= 2]
    return holm([welch(table, a, b) for a, b in combinations(arms, 2)])


def against_reference(table: dict[str, dict[int, float]], reference: str) -> list[dict[str, Any]]:
    """Every other arm against `reference` (Welch), with Holm's verdict over those comparisons."""
    tests = [
        welch(table, arm, reference)
        for arm, seeds in table.items()
        if arm != reference and len(seeds) >= 2
    ]
    rejected = [id(test) for test in holm(tests)]
    return [test | {"holm": id(test) in rejected} for test in tests]


def intervals_apart(table: dict[str, dict[int, float]]) -> list[str]:
    """Pairs whose 95% t intervals over seeds do not overlap (descriptive, not a test)."""
    bounds = {arm: t_interval(list(seeds.values())) for arm, seeds in table.items()}
    arms = [arm for arm, seeds in table.items() if len(seeds) >= 2]
    return [
        f"{a} < {b}" if bounds[a][1] < bounds[b][0] else f"{b} < {a}"
        for a, b in combinations(arms, 2)
        if bounds[a][1] < bounds[b][0] or bounds[b][1] < bounds[a][0]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("roots", nargs="*", type=Path)
    parser.add_argument("--add", action="append", default=[], metavar="ARM:SEED:FIGURES")
    parser.add_argument("--start", type=Path, help="the starting model's figures.json")
    parser.add_argument(
        "--reference", default="marshal", help="the arm the others are tested against"
    )
    args = parser.parse_args()
    table = collect(args.roots, args.add)
    if not table:
        sys.exit("no runs found: give bench roots holding <arm>-seed<N>/figures.json")
    order = sorted(table, key=lambda arm: float(np.mean(list(table[arm].values()))))
    print("| arm | per seed | mean [95% t over seeds] |")
    print("|---|---|---|")
    if args.start:
        print(f"| start | {_exploitability(args.start):.3f} | |")
    for arm in order:
        seeds = table[arm]
        values = [seeds[seed] for seed in sorted(seeds)]
        low, high = t_interval(values)
        cells = ", ".join(f"s{seed} {seeds[seed]:.3f}" for seed in sorted(seeds))
        print(f"| `{arm}` | {cells} | {np.mean(values):.3f} [{low:.3f}, {high:.3f}] |")
    pairs = significant_pairs(table)
    tested = sum(len(table[arm]) >= 2 for arm in table)
    print(f"\nsignificant differences (Welch, Holm over {tested * (tested - 1) // 2} pairs):")
    for pair in pairs:
        print(f"  {pair['lower']} < {pair['higher']}  (p = {pair['p']:.2g})")
    if not pairs:
        print("  none")
    versus = against_reference(table, args.reference) if args.reference in table else []
    print(f"\neach arm against {args.reference} (Welch p, two-sided; * = Holm over these):")
    for test in sorted(versus, key=lambda test: test["p"]):
        mark = " *" if test["holm"] else ""
        print(f"  {test['lower']} < {test['higher']}  p = {test['p']:.2g}{mark}")
    apart = intervals_apart(table)
    print("\n95% t intervals over seeds apart: " + (", ".join(apart) if apart else "none"))
    best = order[0]
    print(
        json.dumps(
            {
                "metric": "ablation_best_arm_kuhn_worst_seed",
                "value": round(max(table[best].values()), 4),
                "target": 0.15,
                "met": max(table[best].values()) <= 0.15,
                "best_arm": best,
                "per_arm_per_seed": {
                    arm: [round(table[arm][seed], 4) for seed in sorted(table[arm])]
                    for arm in order
                },
                "significant": [f"{p['lower']} < {p['higher']}" for p in pairs],
                "against_reference": {
                    (test["lower"] if test["higher"] == args.reference else test["higher"]): {
                        "p": round(test["p"], 4),
                        "lower_than_reference": test["higher"] == args.reference,
                        "holm": test["holm"],
                    }
                    for test in versus
                },
                "intervals_apart": apart,
            }
        )
    )


if __name__ == "__main__":
    main()
