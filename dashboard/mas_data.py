"""MAS training runs (`mars train-mas`) role by role: plain functions, no Streamlit.

A MAS training run is a `train` run whose `run.json` config names a `workflow`. Its
`metrics.jsonl` has, per step, `return_mean/<role>` (the mean return of that role's branches),
`policy/<name>/{samples,loss,kl,grad_norm,updates}` (each policy's update), `train_accuracy` and,
at eval steps, `eval/accuracy` with its interval. Its `records.jsonl` has one `workflow` record
per problem and step: the main line's transcript and `rewards`, keyed `<role>/<k>` for the
reward of that role's k-th call (k from 0). Missing or malformed fields are skipped, never fatal.
"""

from __future__ import annotations

import math
import numbers
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from core.checkpoints import adapter_info, complete_checkpoints
from core.errors import MarsError
from dashboard.data import RunEntry
from dashboard.paths import PathRefused, inside_root

RETURN_PREFIX = "return_mean/"
POLICY_PREFIX = "policy/"
UPDATE_STATS = ("loss", "kl", "grad_norm")
POLICY_STATS = ("samples", "loss", "kl", "grad_norm", "updates")
# The policy name `mars train-mas` gives the one policy every role shares (no `policies` map).
SHARED_POLICY = "policy"
WORKFLOW_KIND = "workflow"
TRAIN_SERIES = "train (main lines)"
HELDOUT_SERIES = "held-out"


# ---------------------------------------------------------------- runs


def is_mas_training(run: RunEntry) -> bool:
    return run.kind == "train" and bool(run.config.get("workflow"))


def mas_training_runs(runs: Iterable[RunEntry]) -> list[RunEntry]:
    return [run for run in runs if is_mas_training(run)]


def configured_policies(config: dict[str, Any]) -> dict[str, str]:
    """The run's role -> policy map as configured (empty: one shared policy)."""
    policies = config.get("policies")
    if not isinstance(policies, dict):
        return {}
    return {str(role): str(name) for role, name in policies.items()}


def role_policy_map(config: dict[str, Any], roles: Sequence[str]) -> dict[str, str]:
    """Every role -> the policy that acts for it (the shared policy when none is named)."""
    policies = configured_policies(config)
    return {role: policies.get(role, SHARED_POLICY) for role in roles}


def is_multi_policy(config: dict[str, Any]) -> bool:
    """Several policies keep their checkpoints apart, under `policies/<name>/`."""
    return len(set(configured_policies(config).values())) > 1


def workflow_roles(
    metrics: pd.DataFrame, records: Sequence[dict[str, Any]], config: dict[str, Any]
) -> list[str]:
    """The workflow's roles, in the order they first show: the configured policy map, the
    metrics' `return_mean/<role>` columns, then the agents of the records' transcripts."""
    found: dict[str, None] = dict.fromkeys(configured_policies(config))
    found.update(dict.fromkeys(_return_columns(metrics)))
    for record in records:
        for message in _messages_of(record):
            found[_agent_of(message)] = None
    return list(found)


# ---------------------------------------------------------------- metrics curves


def _return_columns(frame: pd.DataFrame) -> dict[str, str]:
    """role -> its `return_mean/<role>` column."""
    return {
        column[len(RETURN_PREFIX) :]: column
        for column in frame.columns
        if column.startswith(RETURN_PREFIX) and len(column) > len(RETURN_PREFIX)
    }


def role_return_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (step, role) with a `return_mean/<role>` value."""
    rows = [
        {"step": step, "role": role, "return_mean": value}
        for role, column in _return_columns(frame).items()
        for step, value in _numbers_by_step(frame, column)
    ]
    return pd.DataFrame(rows, columns=["step", "role", "return_mean"])


def policy_names(frame: pd.DataFrame) -> list[str]:
    """The policies with update figures: `policy/<name>/<stat>` columns, stat one of
    POLICY_STATS (a game run's `policy/<game>/<state>/<action>` shares have four parts)."""
    names: dict[str, None] = {}
    for column in frame.columns:
        parts = column.split("/")
        if len(parts) == 3 and parts[0] == "policy" and parts[2] in POLICY_STATS:
            names[parts[1]] = None
    return list(names)


def policy_update_curves(frame: pd.DataFrame, stats: Sequence[str] = UPDATE_STATS) -> pd.DataFrame:
    """One row per (step, policy, stat) from the `policy/<name>/<stat>` columns."""
    rows = [
        {"step": step, "policy": name, "stat": stat, "value": value}
        for name in policy_names(frame)
        for stat in stats
        for step, value in _numbers_by_step(frame, f"{POLICY_PREFIX}{name}/{stat}")
    ]
    return pd.DataFrame(rows, columns=["step", "policy", "stat", "value"])


def accuracy_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """`train_accuracy` (the main lines' final answers) and `eval/accuracy` (held-out problems,
    with its 95% interval where recorded) by step."""
    rows = [
        {"step": step, "series": TRAIN_SERIES, "accuracy": value, "ci_low": None, "ci_high": None}
        for step, value in _numbers_by_step(frame, "train_accuracy")
    ]
    if "eval/accuracy" in frame.columns:
        for row in frame.to_dict("records"):
            value = _number(row["eval/accuracy"])
            if value is None:
                continue
            low, high = _heldout_interval(row)
            rows.append(
                {
                    "step": row["step"],
                    "series": HELDOUT_SERIES,
                    "accuracy": value,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    return pd.DataFrame(rows, columns=["step", "series", "accuracy", "ci_low", "ci_high"])


def _heldout_interval(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """`eval/accuracy_ci95_low|high` (what `mars train-mas` writes), else `eval/ci95` or
    `eval/accuracy_ci95` as [low, high]."""
    low = _number(row.get("eval/accuracy_ci95_low"))
    high = _number(row.get("eval/accuracy_ci95_high"))
    if low is not None and high is not None:
        return low, high
    for column in ("eval/ci95", "eval/accuracy_ci95"):
        pair = row.get(column)
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            low, high = _number(pair[0]), _number(pair[1])
            if low is not None and high is not None:
                return low, high
    return None, None


def _numbers_by_step(frame: pd.DataFrame, column: str) -> list[tuple[Any, float]]:
    if column not in frame.columns or "step" not in frame.columns:
        return []
    pairs = []
    for step, value in zip(frame["step"], frame[column], strict=True):
        number = _number(value)
        if number is not None:
            pairs.append((step, number))
    return pairs


def _number(value: Any) -> float | None:
    """A finite number as a float; None for anything else (missing, NaN, text, a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# ---------------------------------------------------------------- checkpoints


def policy_checkpoints(
    root: Path, run_path: Path, config: dict[str, Any], roles: Sequence[str]
) -> pd.DataFrame:
    """Per policy: its roles, where its checkpoints are, the steps saved (a `step_N` folder
    with its `checkpoint.json`, written last) and what they hold (a whole model, or a LoRA
    adapter on a base; a frozen partner saves none). One shared policy: `RUN/checkpoints/`;
    several: `RUN/policies/<name>/checkpoints/`."""
    frozen = set(config.get("frozen_policies") or ())
    by_policy: dict[str, list[str]] = defaultdict(list)
    for role, name in role_policy_map(config, roles).items():
        by_policy[name].append(role)
    rows = []
    for name, its_roles in by_policy.items():
        folder = Path("policies") / name if is_multi_policy(config) else Path()
        folder = folder / "checkpoints"
        steps = saved_steps(root, run_path / folder)
        last = run_path / folder / f"step_{steps[-1]}" if steps else None
        rows.append(
            {
                "policy": name,
                "roles": ", ".join(its_roles),
                "checkpoints": folder.as_posix(),
                "saved steps": ", ".join(str(step) for step in steps) or "-",
                "last": steps[-1] if steps else None,
                "holds": "frozen partner" if name in frozen else checkpoint_kind(last),
            }
        )
    return pd.DataFrame(rows, columns=[*CHECKPOINT_COLUMNS, "holds"])


CHECKPOINT_COLUMNS = ("policy", "roles", "checkpoints", "saved steps", "last")


def checkpoint_kind(folder: Path | None) -> str:
    """What a checkpoint holds: a whole model, or a LoRA adapter on the base it names."""
    if folder is None:
        return "-"
    try:
        info = adapter_info(folder)
    except MarsError:
        return "adapter (unreadable)"
    return f"LoRA adapter on {Path(info.base).name}" if info is not None else "whole model"


def saved_steps(root: Path, checkpoints: Path) -> list[int]:
    """The steps of the complete checkpoints under `checkpoints` (none outside the root)."""
    try:
        return [step for step, _ in complete_checkpoints(inside_root(root, checkpoints))]
    except (PathRefused, OSError):
        return []


# ---------------------------------------------------------------- workflow records


def workflow_records(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of `kind` "workflow" (one per problem and step)."""
    return [row for row in rows if row.get("kind") == WORKFLOW_KIND]


def _transcript_of(record: dict[str, Any]) -> dict[str, Any]:
    transcript = record.get("transcript")
    return transcript if isinstance(transcript, dict) else {}


def _messages_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    messages = _transcript_of(record).get("messages")
    if not isinstance(messages, list):
        return []
    return [message for message in messages if isinstance(message, dict)]


def _agent_of(message: dict[str, Any]) -> str:
    return str(message.get("agent") or "-")


def _rewards_of(record: dict[str, Any]) -> dict[str, float]:
    rewards = record.get("rewards")
    if not isinstance(rewards, dict):
        return {}
    numbers = {str(key): _number(value) for key, value in rewards.items()}
    return {key: value for key, value in numbers.items() if value is not None}


def reward_role(key: str) -> str:
    """The role of a rewards key `<role>/<k>`."""
    return key.rsplit("/", 1)[0]


def record_step(record: dict[str, Any]) -> int | None:
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


RECORD_COLUMNS = ["step", "problem_id", "reference", "final_answer", "correct", "calls", "row"]


def workflow_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per workflow record; `row` indexes `records`."""
    rows = [
        {
            "step": record_step(record),
            "problem_id": str(record.get("problem_id", "-")),
            "reference": _text_or_none(record.get("reference")),
            "final_answer": _text_or_none(_transcript_of(record).get("final_answer")),
            "correct": record.get("correct") is True,
            "calls": len(_messages_of(record)),
            "row": index,
        }
        for index, record in enumerate(records)
    ]
    return pd.DataFrame(rows, columns=RECORD_COLUMNS)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass
class WorkflowMessage:
    index: int  # position in the transcript, from 1
    agent: str  # the role that spoke
    round: int | None
    call: int  # this is the agent's call number `call` (from 0)
    reward_key: str  # `<agent>/<call>`, the key of its reward in the record's `rewards`
    reward: float | None  # None: the record has no reward for this call
    text: str
    reasoning: str


def workflow_messages(record: dict[str, Any]) -> list[WorkflowMessage]:
    """The transcript's messages in order, each with the reward its role's call earned: the k-th
    message of a role gets `rewards["<role>/<k>"]`."""
    rewards = _rewards_of(record)
    calls_so_far: dict[str, int] = defaultdict(int)
    views = []
    for index, message in enumerate(_messages_of(record), start=1):
        agent = _agent_of(message)
        call = calls_so_far[agent]
        calls_so_far[agent] += 1
        key = f"{agent}/{call}"
        round_number = message.get("round")
        views.append(
            WorkflowMessage(
                index=index,
                agent=agent,
                round=round_number if isinstance(round_number, int) else None,
                call=call,
                reward_key=key,
                reward=rewards.get(key),
                text=str(message.get("text") or ""),
                reasoning=str(message.get("reasoning") or ""),
            )
        )
    return views


def unmatched_rewards(
    record: dict[str, Any], messages: Sequence[WorkflowMessage]
) -> dict[str, float]:
    """Rewards whose key names no message of the transcript (shown apart, never dropped)."""
    shown = {message.reward_key for message in messages}
    return {key: value for key, value in _rewards_of(record).items() if key not in shown}


def message_table(messages: Sequence[WorkflowMessage]) -> pd.DataFrame:
    rows = [
        {
            "#": message.index,
            "agent": message.agent,
            "round": message.round,
            "call": message.call,
            "reward key": message.reward_key,
            "reward": message.reward,
            "chars": len(message.text),
        }
        for message in messages
    ]
    return pd.DataFrame(
        rows, columns=["#", "agent", "round", "call", "reward key", "reward", "chars"]
    )


def workflow_rounds(record: dict[str, Any]) -> pd.DataFrame:
    """`transcript.extra.rounds` as a table (e.g. reasoner_tool's program, how it ran, both
    answers), columns in the order they first show."""
    extra = _transcript_of(record).get("extra")
    rounds = extra.get("rounds") if isinstance(extra, dict) else None
    rows = [item for item in rounds if isinstance(item, dict)] if isinstance(rounds, list) else []
    columns: list[str] = []
    for row in rows:
        columns += [column for column in row if column not in columns]
    return pd.DataFrame(rows, columns=columns)


ROLE_REWARD_COLUMNS = [
    "step",
    "role",
    "problems",
    "calls",
    "mean_reward",
    "mean_reward_per_call",
]


def role_reward_summary(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per step and role, over the step's records: `mean_reward` is the mean over problems of
    the role's summed rewards on the main line, `mean_reward_per_call` the mean reward of one of
    its calls. (`return_mean/<role>` in the metrics is over every branch, not the main line.)"""
    totals: dict[tuple[int, str], list[float]] = defaultdict(list)
    calls: dict[tuple[int, str], int] = defaultdict(int)
    for record in records:
        step = record_step(record)
        if step is None:
            continue
        per_role: dict[str, float] = defaultdict(float)
        for key, value in _rewards_of(record).items():
            per_role[reward_role(key)] += value
            calls[(step, reward_role(key))] += 1
        for role, total in per_role.items():
            totals[(step, role)].append(total)
    rows = [
        {
            "step": step,
            "role": role,
            "problems": len(values),
            "calls": calls[(step, role)],
            "mean_reward": sum(values) / len(values),
            "mean_reward_per_call": sum(values) / calls[(step, role)],
        }
        for (step, role), values in sorted(totals.items())
    ]
    return pd.DataFrame(rows, columns=ROLE_REWARD_COLUMNS)
