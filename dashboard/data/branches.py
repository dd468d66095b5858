"""The training inspector's tables: a tree step's states, the branches compared at one state, and
the collapse signals over steps (from `branches/step_N.jsonl.gz`, core.branch_log)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from core import branch_log

SIGNALS = {
    "flat_group_share": "groups whose returns are all equal",
    "duplicate_reply_share": "replies repeating one of their group",
    "action_entropy_bits": "entropy of the actions per state (bits)",
}
SHARE_SIGNALS = ("flat_group_share", "duplicate_reply_share")


def has_branches(run_path: Path) -> bool:
    return bool(branch_log.logged_steps(run_path))


def state_label(line: Mapping[str, Any]) -> str:
    """A short name for what the seat saw: the line after "State:" in its last message (the
    project's game prompts), else that message's last line; the role and call in a workflow."""
    if line.get("role"):
        return f"{line['role']} call {line['turn']}"
    text = str(line.get("observation") or "")
    lines = [part.strip() for part in text.splitlines() if part.strip()]
    for index, part in enumerate(lines):
        if part.rstrip(":").lower() == "state" and index + 1 < len(lines):
            return lines[index + 1]
    return lines[-1] if lines else str(line.get("state", ""))[:8]


def states_table(lines: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per state of the step: how many groups were sampled there and what they held."""
    columns = [
        "state",
        "label",
        "game",
        "player",
        "groups",
        "branches",
        "actions",
        "invalid",
        "return_min",
        "return_max",
        "flat_groups",
        "trained",
    ]
    if not lines:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(list(lines))
    frame["player"] = [line.get("role") or f"seat {line.get('seat')}" for line in lines]
    rows = []
    for state, part in frame.groupby("state", sort=False):
        groups = part.groupby("group")["return"]
        flat = int(((groups.max() - groups.min()).abs() < 1e-9).sum())
        actions = pd.Series([branch_log.action_of(b) for b in part.to_dict("records")])
        rows.append(
            {
                "state": state,
                "label": state_label(part.iloc[0].to_dict()),
                "game": part["game"].iloc[0],
                "player": part["player"].iloc[0],
                "groups": int(part["group"].nunique()),
                "branches": len(part),
                "actions": " ".join(_action_counts(actions)),
                "invalid": int((part["legal"] == False).sum()),  # noqa: E712 (None is unknown)
                "return_min": float(part["return"].min()),
                "return_max": float(part["return"].max()),
                "flat_groups": flat,
                "trained": int(part["trained"].sum()),
            }
        )
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["game", "player", "label"], kind="stable").reset_index(drop=True)


def _action_counts(actions: pd.Series) -> list[str]:
    counts = actions.astype(str).map(lambda a: a if len(a) <= 24 else a[:21] + "...")
    return [f"{name} x{count}" for name, count in counts.value_counts().items()]


def groups_at(lines: Sequence[Mapping[str, Any]], state: str) -> list[list[dict[str, Any]]]:
    """The groups sampled at `state`, each its branches in order (the main line's marked)."""
    groups = branch_log.groups_of(line for line in lines if line.get("state") == state)
    return [sorted(map(dict, group), key=lambda b: b["branch"]) for group in groups.values()]


def signals_frame(metrics: pd.DataFrame) -> pd.DataFrame:
    """The collapse signals per step in long form (step, signal, value), from metrics.jsonl."""
    wanted = {f"{branch_log.SIGNAL_PREFIX}{name}": name for name in SIGNALS}
    present = [column for column in wanted if column in metrics.columns]
    if metrics.empty or "step" not in metrics.columns or not present:
        return pd.DataFrame(columns=["step", "signal", "value"])
    long = metrics[["step", *present]].melt(id_vars="step", var_name="signal", value_name="value")
    long["signal"] = long["signal"].map(wanted)
    return long.dropna(subset=["value"]).reset_index(drop=True)
