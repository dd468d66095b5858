"""The training inspector's tables: a tree step's states, the branches compared at one state, one
state across steps, and the collapse signals over steps (from `branches/step_N.jsonl.gz`,
core.branch_log).

The collapse signals are the policy's: they are computed over the *sampled* branches only. A
branch the all-actions (or counterfactual) option rewrote (`forced`) plays an action the policy
did not choose, so counting it would show diversity that is not there (on the demo's Kuhn run,
0.90 bits of action entropy per state at step 50 with the forced branches, 0.66 without them);
the forced ones are counted apart.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
FORCED = f"{branch_log.SIGNAL_PREFIX}forced"  # forced branches a step left out of its signals
SIGNAL_COLUMNS = ["step", "signal", "value", "forced"]
STATE_COLUMNS = [
    "label",
    "player",
    "game",
    "groups",
    "branches",
    "forced",
    "invalid",
    "actions",
    "entropy_bits",
    "return_min",
    "return_max",
    "flat_groups",
    "trained",
    "state",
]
OVER_STEPS_COLUMNS = [
    "step",
    "groups",
    "branches",
    "forced",
    "invalid",
    "actions",
    "entropy_bits",
    "return_mean",
    "return_min",
    "return_max",
    "flat_groups",
    "trained",
]


def has_branches(run_path: Path) -> bool:
    return bool(branch_log.logged_steps(run_path))


def is_forced(line: Mapping[str, Any]) -> bool:
    return bool(line.get("forced"))


def sampled(lines: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The branches the policy sampled itself (the forced ones left out)."""
    return [line for line in lines if not is_forced(line)]


def step_signals(lines: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A step's collapse signals over its sampled branches, and `branches/forced`: what the
    trainers log (`core.branch_log.sampled_collapse_signals`), for runs logged before."""
    return branch_log.sampled_collapse_signals(lines)


def forced_possible(config: Mapping[str, Any]) -> bool:
    """Whether a run's tree could rewrite branches (all-actions or counterfactual)."""
    tree = config.get("tree")
    return isinstance(tree, Mapping) and bool(tree.get("all_actions") or tree.get("counterfactual"))


def metrics_signals_are_sampled(metrics: pd.DataFrame, config: Mapping[str, Any]) -> bool:
    """Whether metrics.jsonl's collapse signals already leave forced branches out: the trainer
    wrote `branches/forced` beside them, or the run's tree forces none. Otherwise they are
    recomputed from the branch logs (`step_signals`)."""
    return FORCED in metrics.columns or not forced_possible(config)


def signals_frame(metrics: pd.DataFrame) -> pd.DataFrame:
    """The collapse signals per step in long form (step, signal, value, forced), from a frame
    with a `step` column and `branches/...` columns (metrics.jsonl, or `logged_signals`)."""
    wanted = {f"{branch_log.SIGNAL_PREFIX}{name}": name for name in SIGNALS}
    present = [column for column in wanted if column in metrics.columns]
    if metrics.empty or "step" not in metrics.columns or not present:
        return pd.DataFrame(columns=SIGNAL_COLUMNS)
    wide = metrics[["step", *present]].copy()
    wide["forced"] = metrics[FORCED] if FORCED in metrics.columns else float("nan")
    long = wide.melt(id_vars=["step", "forced"], var_name="signal", value_name="value")
    long["signal"] = long["signal"].map(wanted)
    return long.dropna(subset=["value"]).reset_index(drop=True)[SIGNAL_COLUMNS]


def logged_signals(by_step: Mapping[int, Mapping[str, float]]) -> pd.DataFrame:
    """`step_signals` of each logged step as one frame (a row per step), for `signals_frame`."""
    rows = [{"step": step, **signals} for step, signals in sorted(by_step.items()) if signals]
    return pd.DataFrame(rows)


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


def player_of(line: Mapping[str, Any]) -> str:
    return str(line.get("role") or f"seat {line.get('seat')}")


def states_table(lines: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per state of the step: how many groups were sampled there and what they held.
    `actions` and `entropy_bits` are of the sampled branches (`forced` counts the others);
    returns, flat groups and trained branches are of every branch, as the update compared
    them."""
    if not lines:
        return pd.DataFrame(columns=STATE_COLUMNS)
    by_state: dict[str, list[Mapping[str, Any]]] = {}
    for line in lines:
        by_state.setdefault(str(line.get("state")), []).append(line)
    rows = [
        {"label": state_label(part[0]), "player": player_of(part[0]), **_summary(part)}
        | {"game": part[0].get("game"), "state": state}
        for state, part in by_state.items()
    ]
    table = pd.DataFrame(rows, columns=STATE_COLUMNS)
    return table.sort_values(["game", "player", "label"], kind="stable").reset_index(drop=True)


def _summary(branches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a set of branches of one state held (a step's, for the states table; one step's
    share of a state, for the view across steps)."""
    own = [branch_log.action_of(b) for b in sampled(branches)]
    returns = [float(b["return"]) for b in branches]
    groups = branch_log.groups_of(branches)
    return {
        "groups": len(groups),
        "branches": len(branches),
        "forced": len(branches) - len(own),
        "invalid": sum(1 for b in branches if b.get("legal") is False),
        "actions": " ".join(action_counts(own)),
        "entropy_bits": entropy_bits(own),
        "return_mean": sum(returns) / len(returns),
        "return_min": min(returns),
        "return_max": max(returns),
        "flat_groups": sum(1 for g in groups.values() if _flat(g)),
        "trained": sum(1 for b in branches if b.get("trained")),
    }


def _flat(group: Sequence[Mapping[str, Any]]) -> bool:
    returns = [float(b["return"]) for b in group]
    return max(returns) - min(returns) < 1e-9


def entropy_bits(actions: Sequence[Any]) -> float | None:
    """The entropy of the actions taken (bits); None without any."""
    if not actions:
        return None
    counts = Counter(str(a) for a in actions).values()
    total = sum(counts)
    return -sum(c / total * math.log2(c / total) for c in counts) + 0.0


def action_counts(actions: Iterable[Any]) -> list[str]:
    """`<BET> x3`, most taken first (long replies standing for an action cut to 24 chars)."""
    counts = Counter(_short_action(a) for a in actions)
    return [f"{name} x{count}" for name, count in counts.most_common()]


def _short_action(action: Any) -> str:
    text = str(action)
    return text if len(text) <= 24 else text[:21] + "..."


def groups_at(lines: Sequence[Mapping[str, Any]], state: str) -> list[list[dict[str, Any]]]:
    """The groups sampled at `state`, each its branches in order (the main line's marked)."""
    groups = branch_log.groups_of(line for line in lines if line.get("state") == state)
    return [sorted(map(dict, group), key=lambda b: b["branch"]) for group in groups.values()]


@dataclass(frozen=True)
class StepDigest:
    """What the views across steps need of one step's file, small enough to keep for every
    step: its collapse signals and, per state, its summary and its sampled actions."""

    signals: dict[str, float]
    states: dict[str, dict[str, Any]]  # state -> `_summary`
    actions: dict[str, Counter[str]]  # state -> sampled action -> count


def step_digest(lines: Sequence[Mapping[str, Any]]) -> StepDigest:
    by_state: dict[str, list[Mapping[str, Any]]] = {}
    for line in lines:
        by_state.setdefault(str(line.get("state")), []).append(line)
    return StepDigest(
        signals=step_signals(lines),
        states={state: _summary(part) for state, part in by_state.items()},
        actions={
            state: Counter(_short_action(branch_log.action_of(b)) for b in sampled(part))
            for state, part in by_state.items()
        },
    )


def state_over_steps(digests: Mapping[int, StepDigest], state: str) -> pd.DataFrame:
    """One row per logged step that sampled `state`: its groups, branches (forced apart), the
    sampled actions and their entropy, the returns, flat groups and trained branches."""
    rows = [
        {"step": step, **digest.states[state]}
        for step, digest in sorted(digests.items())
        if state in digest.states
    ]
    return pd.DataFrame(rows, columns=OVER_STEPS_COLUMNS)


def action_shares_over_steps(digests: Mapping[int, StepDigest], state: str) -> pd.DataFrame:
    """Per logged step that sampled `state`, each action's share of its sampled branches (long
    form: step, action, count, share); an action taken at some step and not at this one is 0
    here, so its line does not jump over the step."""
    taken = {
        step: digest.actions[state]
        for step, digest in sorted(digests.items())
        if sum((digest.actions.get(state) or Counter()).values())
    }
    actions = sorted({action for counts in taken.values() for action in counts})
    rows = [
        {"step": step, "action": action, "count": counts[action],
         "share": counts[action] / sum(counts.values())}
        for step, counts in taken.items()
        for action in actions
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["step", "action", "count", "share"])


def branches_over_steps(
    by_step: Mapping[int, Sequence[Mapping[str, Any]]], state: str
) -> pd.DataFrame:
    """Every logged branch at `state`, step by step: where it was and what it did."""
    rows = [
        {
            "step": step,
            "episode": line.get("episode"),
            "branch": line.get("branch"),
            "main line": bool(line.get("chosen")),
            "forced": is_forced(line),
            "action": branch_log.action_of(line) if line.get("action") is not None else None,
            "legal": line.get("legal"),
            "return": line.get("return"),
            "advantage": line.get("advantage"),
            "trained": bool(line.get("trained")),
            "reply": line.get("reply"),
        }
        for step, lines in sorted(by_step.items())
        for line in lines
        if line.get("state") == state
    ]
    return pd.DataFrame(rows)
