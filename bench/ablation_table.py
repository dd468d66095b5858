"""The all-arms table: every arm over its seeds, per game, and which pairs of arms differ.

Reads the per-run figures that `bench/selfplay_ablation.py` writes (`ROOT/<arm>-seed<N>/
figures.json`), from one or more bench roots, plus single runs measured elsewhere with the same
budget (`--add arm:seed:path/to/figures.json`, e.g. a Kuhn configuration trained by hand and
measured with `selfplay_ablation.py --measure`). A run fills the columns of the games it trained
(its `run.json`; a run added by hand is a Kuhn run):

- Kuhn exploitability (lower is better);
- the Mini Hanabi self-play score (mean over the run's measured games, of 4);
- Tic-Tac-Toe non-loss against `random` as X (first seat) and as O (second seat).

Prints one row per arm (each column's mean and 95% t interval over seeds, and the starting
model's figure from the roots' `start/figures.json`), each column's seeds, the pairs of arms whose
means differ (Welch's t-test over seeds, Holm-corrected over all pairs of that column at 0.05),
each arm against a reference arm (Holm over those comparisons), the pairs whose intervals over
seeds are apart (descriptive), and a last JSON line.

Run: .venv/bin/python bench/ablation_table.py ROOT [ROOT ...] [--add arm:seed:figures.json ...]
     [--reference marshal]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, game_specs, run_dry
from core.errors import MarsError

RUN_DIR = re.compile(r"^(?P<arm>.+)-seed(?P<seed>\d+)$")
ALPHA = 0.05
TARGET_KUHN = 0.15  # issue 22: the best arm, in every seed

Figures = dict[str, Any]
Table = dict[str, dict[int, float]]  # arm -> seed -> value


def _ttt(figures: Figures, seat: str) -> float:
    cell = figures["ttt"][f"random/{seat}"]
    return cell["non_loss"] / cell["n"]


@dataclass(frozen=True)
class Column:
    title: str
    game: str
    lower_is_better: bool
    value: Callable[[Figures], float]


COLUMNS = {
    "kuhn": Column(
        "Kuhn exploitability", "kuhn_poker", True, lambda f: f["kuhn"]["exploitability"]
    ),
    "hanabi": Column(
        "Mini Hanabi score", "mini_hanabi", False, lambda f: float(np.mean(f["hanabi"]))
    ),
    "ttt_x": Column("TTT non-loss vs random, X", "tic_tac_toe", False, lambda f: _ttt(f, "first")),
    "ttt_o": Column("TTT non-loss vs random, O", "tic_tac_toe", False, lambda f: _ttt(f, "second")),
}


def trained_games(run_dir: Path) -> list[str]:
    run = run_dir / "run.json"
    if not run.exists():
        return ["kuhn_poker"]
    return list(json.loads(run.read_text())["config"]["games"])


@dataclass
class Collected:
    tables: dict[str, Table]  # column -> arm -> seed -> value
    starts: dict[str, Figures]  # game -> the starting model's figures (a root's start/)
    runs: list[tuple[str, int, Figures, list[str]]]  # (arm, seed, figures, games trained)

    def start_value(self, name: str) -> float | None:
        column = COLUMNS[name]
        start = self.starts.get(column.game)
        return column.value(start) if start is not None else None


def collect_runs(
    runs: list[tuple[str, int, Figures, list[str]]], starts: dict[str, Figures]
) -> Collected:
    """The columns of (arm, seed, figures, games trained) runs."""
    tables: dict[str, Table] = {name: {} for name in COLUMNS}
    for arm, seed, figures, games in runs:
        for name, column in COLUMNS.items():
            if column.game in games:
                tables[name].setdefault(arm, {})[seed] = column.value(figures)
    return Collected({name: t for name, t in tables.items() if t}, starts, runs)


def collect(roots: list[Path], added: list[str]) -> Collected:
    runs: list[tuple[str, int, Figures, list[str]]] = []
    starts: dict[str, Figures] = {}
    for root in roots:
        for figures in sorted(root.glob("*-seed*/figures.json")):
            match = RUN_DIR.match(figures.parent.name)
            if match:
                games = trained_games(figures.parent)
                runs.append((match["arm"], int(match["seed"]), _read(figures), games))
                start = root / "start" / "figures.json"
                for game in games if start.exists() else []:
                    starts.setdefault(game, _read(start))
    for item in added:
        arm, seed, path = added_run(item)
        runs.append((arm, seed, _read(path), ["kuhn_poker"]))
    return collect_runs(runs, starts)


def added_run(item: str) -> tuple[str, int, Path]:
    """`--add ARM:SEED:FIGURES` -> (arm, seed, figures file)."""
    arm, _, rest = item.partition(":")
    seed, _, path = rest.partition(":")
    if not arm or not seed.isdigit() or not path:
        raise MarsError(f"--add {item}: expected ARM:SEED:FIGURES")
    return arm, int(seed), Path(path)


def _read(path: Path) -> Figures:
    return json.loads(path.read_text())


def ttt_target(collected: Collected) -> dict[str, Any] | None:
    """Tic-Tac-Toe non-loss against `random` per arm and seat, seeds pooled, against the start:
    the point margin and a one-sided two-proportion z-test of "below the start". The target
    (issue 22): not significantly below in either seat (p >= ALPHA); the best arm is the one
    with the highest worse-seat margin."""
    start = collected.starts.get("tic_tac_toe")
    if start is None:
        return None
    arms: dict[str, Any] = {}
    for arm in dict.fromkeys(r[0] for r in collected.runs if "tic_tac_toe" in r[3]):
        members = [r[2] for r in collected.runs if r[0] == arm and "tic_tac_toe" in r[3]]
        seats = {}
        for seat in ("first", "second"):
            wins, n = _pooled(members, seat)
            start_wins, start_n = _pooled([start], seat)
            seats[seat] = {
                "rate": round(wins / n, 4),
                "start": round(start_wins / start_n, 4),
                "margin": round(wins / n - start_wins / start_n, 4),
                "p_below": round(_p_below(wins, n, start_wins, start_n), 4),
                "games": n,
            }
        arms[arm] = {
            "seats": seats,
            "worst_margin": min(seat["margin"] for seat in seats.values()),
            "not_below": all(seat["p_below"] >= ALPHA for seat in seats.values()),
        }
    best = max(arms, key=lambda arm: arms[arm]["worst_margin"])
    return {
        "best_arm": best,
        "met": arms[best]["not_below"],
        "arms_not_below": [arm for arm in arms if arms[arm]["not_below"]],
        "arms": arms,
    }


def ttt_hanabi_line(collected: Collected) -> dict[str, Any]:
    """The Tic-Tac-Toe target (`ttt_target`) as a result line, with the Mini Hanabi target."""
    ttt = ttt_target(collected)
    line: dict[str, Any] = {"metric": "hanabi_against_the_start"}
    if ttt is not None:
        line = {
            "metric": "best_arm_ttt_non_loss_vs_random_worst_seat_minus_start",
            "value": ttt["arms"][ttt["best_arm"]]["worst_margin"],
            "target": "not below the start in either seat (one-sided p >= 0.05)",
            "met": ttt["met"],
            "best_arm": ttt["best_arm"],
            "arms_not_below": ttt["arms_not_below"],
        }
    line["hanabi"] = hanabi_target(collected)
    return line


def _pooled(members: list[Figures], seat: str) -> tuple[int, int]:
    cells = [m["ttt"][f"random/{seat}"] for m in members]
    return sum(c["non_loss"] for c in cells), sum(c["n"] for c in cells)


def _p_below(wins: int, n: int, start_wins: int, start_n: int) -> float:
    """One-sided p-value of "the arm's rate is below the start's" (pooled two-proportion z)."""
    pooled = (wins + start_wins) / (n + start_n)
    se = np.sqrt(pooled * (1 - pooled) * (1 / n + 1 / start_n))
    if se == 0:
        return 1.0
    return float(stats.norm.cdf((wins / n - start_wins / start_n) / se))


def hanabi_target(collected: Collected) -> dict[str, Any] | None:
    """Per arm: whether the 95% t interval over seeds of the Mini Hanabi score lies above the
    start's 95% bootstrap interval (issue 22: above the start, intervals apart)."""
    start = collected.starts.get("mini_hanabi")
    table = collected.tables.get("hanabi")
    if start is None or table is None:
        return None
    from core.stats import bootstrap_mean_ci

    _, start_high = bootstrap_mean_ci(start["hanabi"])
    above = {arm: t_interval(list(seeds.values()))[0] > start_high for arm, seeds in table.items()}
    return {"start_ci_high": round(start_high, 4), "above_start": above}


def t_interval(values: list[float]) -> tuple[float, float]:
    """95% Student-t interval of the mean over seeds (a point when there is one seed)."""
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if data.size < 2:
        return mean, mean
    half = float(stats.t.ppf(0.975, data.size - 1) * data.std(ddof=1) / np.sqrt(data.size))
    return mean - half, mean + half


def welch(table: Table, a: str, b: str) -> dict[str, Any]:
    """Welch's t-test of two arms' seeds: which is lower, and the two-sided p-value."""
    x, y = list(table[a].values()), list(table[b].values())
    p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
    if np.isnan(p):  # both arms constant: no evidence either way
        p = 1.0
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


def significant_pairs(table: Table) -> list[dict[str, Any]]:
    """Pairs of arms (each with >= 2 seeds) whose means differ: Welch's t-test, Holm's correction
    over every pair."""
    arms = [arm for arm, seeds in table.items() if len(seeds) >= 2]
    return holm([welch(table, a, b) for a, b in combinations(arms, 2)])


def against_reference(table: Table, reference: str) -> list[dict[str, Any]]:
    """Every other arm against `reference` (Welch), with Holm's verdict over those comparisons."""
    tests = [
        welch(table, arm, reference)
        for arm, seeds in table.items()
        if arm != reference and len(seeds) >= 2
    ]
    rejected = [id(test) for test in holm(tests)]
    return [test | {"holm": id(test) in rejected} for test in tests]


def intervals_apart(table: Table) -> list[str]:
    """Pairs whose 95% t intervals over seeds do not overlap (descriptive, not a test)."""
    bounds = {arm: t_interval(list(seeds.values())) for arm, seeds in table.items()}
    arms = [arm for arm, seeds in table.items() if len(seeds) >= 2]
    return [
        f"{a} < {b}" if bounds[a][1] < bounds[b][0] else f"{b} < {a}"
        for a, b in combinations(arms, 2)
        if bounds[a][1] < bounds[b][0] or bounds[b][1] < bounds[a][0]
    ]


def summary_cell(table: Table, arm: str) -> str:
    if arm not in table:
        return ""
    values = list(table[arm].values())
    low, high = t_interval(values)
    return f"{np.mean(values):.3f} [{low:.3f}, {high:.3f}]"


def print_tables(collected: Collected, order: list[str]) -> None:
    tables = collected.tables
    names = list(tables)
    print("| arm | " + " | ".join(COLUMNS[name].title for name in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    starts = [collected.start_value(name) for name in names]
    print("| start | " + " | ".join("" if v is None else f"{v:.3f}" for v in starts) + " |")
    for arm in order:
        print(f"| `{arm}` | " + " | ".join(summary_cell(tables[n], arm) for n in names) + " |")
    print("\n(mean [95% t interval over seeds])")
    for name in names:
        print(f"\n{COLUMNS[name].title}, per seed:")
        for arm in order:
            if arm in tables[name]:
                seeds = tables[name][arm]
                print(f"  {arm:<20} " + ", ".join(f"s{s} {seeds[s]:.3f}" for s in sorted(seeds)))


def print_tests(table: Table, title: str, reference: str) -> dict[str, Any]:
    pairs = significant_pairs(table)
    tested = sum(len(seeds) >= 2 for seeds in table.values())
    print(
        f"\n{title}: significant differences (Welch, Holm over {tested * (tested - 1) // 2} pairs):"
    )
    for pair in pairs:
        print(f"  {pair['lower']} < {pair['higher']}  (p = {pair['p']:.2g})")
    if not pairs:
        print("  none")
    versus = against_reference(table, reference) if reference in table else []
    print(f"{title}: each arm against {reference} (Welch p, two-sided; * = Holm over these):")
    for test in sorted(versus, key=lambda test: test["p"]):
        mark = " *" if test["holm"] else ""
        print(f"  {test['lower']} < {test['higher']}  p = {test['p']:.2g}{mark}")
    apart = intervals_apart(table)
    print(f"{title}: 95% t intervals over seeds apart: " + (", ".join(apart) or "none"))
    return {
        "significant": [f"{p['lower']} < {p['higher']}" for p in pairs],
        "intervals_apart": apart,
        "against_reference": {
            (test["lower"] if test["higher"] == reference else test["higher"]): {
                "p": round(test["p"], 4),
                "lower_than_reference": test["higher"] == reference,
                "holm": test["holm"],
            }
            for test in versus
        },
    }


def print_ttt_target(ttt: dict[str, Any]) -> None:
    print("\nTic-Tac-Toe non-loss against random, seeds pooled, against the start")
    print("(margin; one-sided p of 'below the start'):")
    for arm, row in sorted(ttt["arms"].items(), key=lambda item: -item[1]["worst_margin"]):
        cells = [
            f"{seat} {c['rate']:.2f} ({c['margin']:+.2f}, p {c['p_below']:.2g})"
            for seat, c in row["seats"].items()
        ]
        verdict = "not below" if row["not_below"] else "below"
        print(f"  {arm:<20} " + "   ".join(cells) + f"   {verdict}")


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The columns' games in the registry; each root a folder, each added run's file there; the
    runs' figures read and each column's value taken, as the table would (no table printed)."""
    game_specs(dry, list(dict.fromkeys(column.game for column in COLUMNS.values())))
    for root in args.roots:
        if not root.is_dir():
            raise MarsError(f"{root}: no bench root there")
    for item in args.add:
        if not added_run(item)[2].is_file():
            raise MarsError(f"--add {item}: no figures file there")
    dry.count("run", len(collect(args.roots, args.add).runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("roots", nargs="*", type=Path)
    parser.add_argument("--add", action="append", default=[], metavar="ARM:SEED:FIGURES")
    parser.add_argument(
        "--reference", default="marshal", help="the arm the others are tested against"
    )
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    collected = collect(args.roots, args.add)
    tables = collected.tables
    if not tables:
        sys.exit("no runs found: give bench roots holding <arm>-seed<N>/figures.json")
    first = next(iter(tables.values()))
    arms = list(dict.fromkeys(arm for table in tables.values() for arm in table))
    ranked = sorted(first, key=lambda arm: float(np.mean(list(first[arm].values()))))
    if not COLUMNS[next(iter(tables))].lower_is_better:
        ranked.reverse()
    order = ranked + [arm for arm in arms if arm not in ranked]
    print_tables(collected, order)
    columns: dict[str, Any] = {}
    for name, table in tables.items():
        tests = print_tests(table, COLUMNS[name].title, args.reference)
        columns[name] = {
            "per_arm_per_seed": {
                arm: [round(table[arm][seed], 4) for seed in sorted(table[arm])]
                for arm in order
                if arm in table
            },
            "start": collected.start_value(name),
            **tests,
        }
    result: dict[str, Any] = {"metric": "ablation_all_arms", "columns": columns}
    ttt = ttt_target(collected)
    if ttt is not None:
        print_ttt_target(ttt)
        result = {**ttt_hanabi_line(collected), "columns": columns}
    if "kuhn" in tables:
        kuhn = tables["kuhn"]
        best = min(kuhn, key=lambda arm: float(np.mean(list(kuhn[arm].values()))))
        worst = max(kuhn[best].values())
        result = {
            "metric": "ablation_best_arm_kuhn_worst_seed",
            "value": round(worst, 4),
            "target": TARGET_KUHN,
            "met": worst <= TARGET_KUHN,
            "best_arm": best,
            "ttt": None if ttt is None else ttt_hanabi_line(collected),
            "columns": columns,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
