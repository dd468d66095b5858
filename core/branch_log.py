"""Each training step's tree branches, as the run's `branches/step_N.jsonl.gz` keeps them.

A tree-sampled step (at_grpo, in games and in MAS workflows) draws K replies at each state of a
main line; each is a *branch*, scored by its return. The advantage estimator compares the
branches of one group (the K replies at one state), so what a step compared is these groups. One
line per branch: its group and state, its reply and parsed action, its validity, its immediate
reward and return, the advantage its tokens carried and whether the update used it.

Bounded per step: replies and reasonings keep their first and last characters (`REPLY_CHARS` in
all), and a step with more than `MAX_GROUPS` groups keeps an even, seeded sample of whole groups
(the collapse signals are computed before, over every group). Written by the CPU trainers
(`train_backend.local.trainer`, `train_backend.mas.trainer`) and by verl's trainer
(`train_backend.verl.trainer`); read by the dashboard's training inspector.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BRANCHES_DIR = "branches"
REPLY_CHARS = 600
OBSERVATION_CHARS = 400
MAX_GROUPS = 256
SIGNAL_PREFIX = "branches/"


def clip_text(text: str | None, limit: int = REPLY_CHARS) -> str:
    """`text` whole if it fits, else its head and tail around a marker that says what was cut."""
    if not text:
        return ""
    if len(text) <= limit:
        return text
    tail = limit // 3
    head = limit - tail
    return f"{text[:head]} [... {len(text) - limit} characters ...] {text[-tail:]}"


def observation_of(chat: str) -> str:
    """The last user message of a chat as `tree_nodes.chat_key` wrote it (JSON): what the seat
    was shown at its turn ("" when it cannot be read)."""
    try:
        messages = json.loads(chat)
    except (json.JSONDecodeError, TypeError):
        return ""
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return clip_text(str(message.get("content") or ""), OBSERVATION_CHARS)
    return ""


def group_key(game: str, episode: Any, seat: Any, turn: int) -> str:
    return f"{game}/{episode}/{seat}/{turn}"


def branch_line(
    *,
    step: int,
    game: str,
    episode: Any,
    seat: int,
    turn: int,
    state: str,
    branch: int,
    reply: str,
    ret: float,
    advantage: float,
    trained: bool,
    role: str | None = None,
    chosen: bool | None = None,
    forced: bool = False,
    reasoning: str = "",
    action: str | None = None,
    legal: bool | None = None,
    reward: float | None = None,
    observation: str = "",
) -> dict[str, Any]:
    """One branch as a line of the step's file (its fields: docs/run-format.md). `reply` and
    `reasoning` are kept whole here (the collapse signals compare them); `write_step` clips them."""
    return {
        "step": step,
        "group": group_key(game, episode, role or f"seat{seat}", turn),
        "game": game,
        "episode": episode,
        "seat": seat,
        "role": role,
        "turn": turn,
        "state": state,
        "observation": observation,
        "branch": branch,
        "chosen": chosen,
        "forced": forced,
        "reply": reply,
        "reasoning": reasoning,
        "action": action,
        "legal": legal,
        "reward": reward,
        "return": float(ret),
        "advantage": float(advantage),
        "trained": bool(trained),
    }


def step_lines(
    step: int,
    rows: Sequence[Mapping[str, Any]],
    replies: Sequence[Mapping[str, Any]],
    advantages: np.ndarray,
    trained: np.ndarray,
) -> list[dict[str, Any]]:
    """A tree step's branch lines from its turn rows (a game tree's or a workflow's; the row's
    `reward` is the branch's return) and, aligned with them, what each reply was."""
    lines = []
    for index, (row, reply) in enumerate(zip(rows, replies, strict=True)):
        lines.append(
            branch_line(
                step=step,
                game=str(row["game"]),
                episode=row["episode"],
                seat=int(row["seat"]),
                turn=int(row["turn"]),
                state=str(row.get("state")),
                branch=int(row["branch"]),
                chosen=row.get("chosen"),
                forced=bool(row.get("forced", False)),
                role=row.get("role"),
                reply=str(reply.get("reply") or ""),
                reasoning=str(reply.get("reasoning") or ""),
                action=reply.get("action"),
                legal=row.get("legal"),
                reward=reply.get("reward"),
                observation=str(reply.get("observation") or ""),
                ret=float(row["reward"]),
                advantage=float(advantages[index]),
                trained=bool(trained[index]),
            )
        )
    return lines


def groups_of(lines: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for line in lines:
        groups[str(line["group"])].append(line)
    return dict(groups)


def _entropy_bits(values: Sequence[Any]) -> float:
    counts = np.asarray(list(Counter(values).values()), dtype=np.float64)
    shares = counts / counts.sum()
    return float(-(shares * np.log2(shares)).sum()) + 0.0


def collapse_signals(lines: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A step's signs of a collapsing policy, over its groups of two or more branches:

    - `flat_group_share`: groups whose returns are all equal (no signal for the advantage);
    - `duplicate_reply_share`: replies that repeat an earlier reply of their group, word for word;
    - `action_entropy_bits`: entropy of the parsed actions (an invalid reply counts as one more
      action, "invalid"; without a parsed action, the reply itself), per state, averaged.
    """
    groups = [group for group in groups_of(lines).values() if len(group) > 1]
    if not groups:
        return {}
    flat = sum(1 for g in groups if _spread(b["return"] for b in g) < 1e-9)
    replies = sum(len(g) for g in groups)
    duplicates = sum(len(g) - len({b["reply"] for b in g}) for g in groups)
    by_state: dict[str, list[Any]] = defaultdict(list)
    for group in groups:
        for b in group:
            by_state[str(b["state"])].append(action_of(b))
    entropies = [_entropy_bits(actions) for actions in by_state.values()]
    return {
        f"{SIGNAL_PREFIX}groups": float(len(groups)),
        f"{SIGNAL_PREFIX}flat_group_share": flat / len(groups),
        f"{SIGNAL_PREFIX}duplicate_reply_share": duplicates / replies,
        f"{SIGNAL_PREFIX}action_entropy_bits": float(np.mean(entropies)),
    }


def sampled_collapse_signals(lines: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The step's collapse signals over the branches the policy sampled: a forced branch
    (all-actions, counterfactual) plays an action the policy did not choose, and counting it
    hid a collapse. `branches/forced` counts the ones left out. What the trainers log."""
    if not lines:
        return {}
    sampled = [line for line in lines if not line.get("forced")]
    forced = float(len(lines) - len(sampled))
    return {**collapse_signals(sampled), f"{SIGNAL_PREFIX}forced": forced}


def _spread(values: Iterable[float]) -> float:
    listed = list(values)
    return max(listed) - min(listed)


def action_of(line: Mapping[str, Any]) -> Any:
    """What a branch did, for counting: its parsed action, "invalid", or else its reply."""
    if line.get("legal") is False:
        return "invalid"
    action = line.get("action")
    return action if action is not None else line["reply"]


def bounded(lines: Sequence[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """At most `MAX_GROUPS` whole groups (an even sample, seeded by the step), texts clipped."""
    groups = groups_of(lines)
    names = list(groups)
    if len(names) > MAX_GROUPS:
        keep = set(random.Random(step).sample(names, MAX_GROUPS))
        names = [name for name in names if name in keep]
    out = []
    for name in names:
        for line in groups[name]:
            clipped = dict(line)
            clipped["reply"] = clip_text(line.get("reply"))
            clipped["reasoning"] = clip_text(line.get("reasoning"))
            clipped["observation"] = clip_text(line.get("observation"), OBSERVATION_CHARS)
            out.append(clipped)
    return out


def step_path(run_path: Path, step: int) -> Path:
    return Path(run_path) / BRANCHES_DIR / f"step_{step}.jsonl.gz"


def write_step(run_path: Path, step: int, lines: Sequence[dict[str, Any]]) -> Path | None:
    """Write the step's file (atomically); nothing when the step had no branch."""
    if not lines:
        return None
    path = step_path(run_path, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in bounded(lines, step))
    # mtime=0: the same step's lines make the same bytes (a resumed run rewrites them equal)
    tmp.write_bytes(gzip.compress(body.encode("utf-8"), compresslevel=6, mtime=0))
    tmp.replace(path)
    return path


def read_step(run_path: Path, step: int) -> list[dict[str, Any]]:
    return read_file(step_path(run_path, step))


def read_file(path: Path) -> list[dict[str, Any]]:
    """A step file's branch lines; a line that does not parse (a file cut short) ends the list."""
    out: list[dict[str, Any]] = []
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError):
        return out
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            break
        if isinstance(line, dict):
            out.append(line)
    return out


def logged_steps(run_path: Path) -> list[int]:
    folder = Path(run_path) / BRANCHES_DIR
    steps = []
    for path in folder.glob("step_*.jsonl.gz") if folder.is_dir() else ():
        number = path.name[len("step_") : -len(".jsonl.gz")]
        if number.isdigit():
            steps.append(int(number))
    return sorted(steps)


def remove_after(run_path: Path, step: int) -> None:
    """A resumed run drops the files of steps it will play again."""
    for later in logged_steps(run_path):
        if later > step:
            step_path(run_path, later).unlink(missing_ok=True)
