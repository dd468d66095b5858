"""Whether the experiment's figures rest on valid and varied play: the share of invalid replies
behind every game evaluation at the start and after training, and how many of each training
step's self-play games were distinct games.

A figure made of more than 10% invalid replies measures the reply format more than the play; a
step whose games are mostly one game repeated gives self-play little to learn from. Both are
flagged against the targets below.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from core.files import read_jsonl
from mars.orchestration.experiments.figures import curve, start_and_last
from mars.orchestration.experiments.report_text import INVALID_TARGET, md_table, percent
from mars.orchestration.experiments.spec import Experiment

DISTINCT_TARGET = 0.5  # the least share of a step's games that should be distinct games
GAME_KINDS = ("arena", "exploit")


def _invalid_shares(entry: dict[str, Any] | None) -> dict[str, float | None]:
    """An evaluation's invalid-reply share: per seat for an arena, one ("") for exploitability."""
    if not entry or entry.get("error"):
        return {}
    if entry["kind"] == "arena":
        return {seat: s.get("invalid_rate") for seat, s in (entry.get("seats") or {}).items()}
    return {"": entry.get("invalid_rate")}


def invalid_rows(experiment: Experiment, root: Path) -> list[list[str]]:
    """Per loop part, game evaluation and seat: invalid replies at the start and trained."""
    rows = []
    for part in experiment.parts:
        if part.run != "loop":
            continue
        start, last = start_and_last(curve(root / part.name))
        at_start = (start or {}).get("evals") or {}
        trained = (last or {}).get("evals") or {}
        for key in dict.fromkeys([*at_start, *trained]):
            entry = trained.get(key) or at_start.get(key)
            if entry["kind"] not in GAME_KINDS:
                continue
            before, after = _invalid_shares(at_start.get(key)), _invalid_shares(trained.get(key))
            for seat in dict.fromkeys([*before, *after]):
                shares = [before.get(seat), after.get(seat)]
                over = any((share or 0) > INVALID_TARGET for share in shares)
                rows.append([
                    part.name, entry["game"], key, seat or "—", percent(shares[0]),
                    percent(shares[1]) + (f" (step {last['step']})" if last else ""),
                    f"**over {100 * INVALID_TARGET:.0f}%**" if over else "",
                ])  # fmt: skip
    return rows


def invalid_table(experiment: Experiment, root: Path) -> list[str]:
    rows = invalid_rows(experiment, root)
    header = ["loop", "game", "evaluation", "seat", "start", "trained", "flag"]
    if not rows:
        return []
    flagged = sum(1 for row in rows if row[-1])
    return [
        *md_table(header, rows),
        "",
        f"{flagged} of {len(rows)} rows over the target of {100 * INVALID_TARGET:.0f}% invalid "
        "replies at the start or after training"
        + (": their figures are about the reply format, not the play." if flagged else "."),
    ]


def distinct_steps(run_dir: Path) -> list[tuple[int, int, int, float]] | None:
    """(step, distinct games, games, distinct share) of every step of a training run's metrics
    that records them; None when the run has no metrics file yet."""
    from train_backend.local.runlog import metrics_path
    from train_backend.local.step_metrics import DISTINCT_GAMES, DISTINCT_SHARE

    path = metrics_path(run_dir)
    if not path.is_file():
        return None
    return [
        (row["step"], row[DISTINCT_GAMES], row.get("episodes", 0), row[DISTINCT_SHARE])
        for row in read_jsonl(path).rows
        if row.get(DISTINCT_SHARE) is not None and row.get("step", 0) > 0
    ]


def distinct_table(experiment: Experiment, root: Path) -> tuple[list[str], list[str]]:
    """Per training part, the lowest and median share of a step's games that were distinct
    games; and a line for each part under the target."""
    rows, flags = [], []
    for part in experiment.parts:
        steps = distinct_steps(root / part.name) if part.run == "train" else None
        if steps is None:
            continue
        if not steps:
            rows.append([part.name, "—", "not recorded (its trainer does not log it)", "", ""])
            continue
        step, distinct, games, lowest = min(steps, key=lambda s: (s[3], s[0]))
        median = statistics.median(s[3] for s in steps)
        where = f"{distinct} of {games} distinct at step {step}"
        if lowest < DISTINCT_TARGET:
            flags.append(
                f"{part.name}: self-play repeats its games ({where}, under "
                f"{DISTINCT_TARGET:.0%}): the same game played over gives little to learn from."
            )
        rows.append([
            part.name, str(len(steps)), f"{lowest:.2f} ({where})", f"{median:.2f}",
            f"**under {DISTINCT_TARGET:g}**" if lowest < DISTINCT_TARGET else "",
        ])  # fmt: skip
    header = ["training run", "steps", "lowest distinct share", "median", "flag"]
    return md_table(header, rows), flags
