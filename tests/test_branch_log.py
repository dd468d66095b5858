"""Branch logs (core.branch_log): what a tree step compared, one line per branch.

The game tree's lines are checked against the step itself (a scripted Kuhn player whose replies
are known), the collapse signals against hand-computed values, the file's bound on whole groups,
and the real CPU trainer for the files it writes, the signals in its metrics and a resume.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_tree_rollout import BET, PASS, policy, tree_step  # noqa: F401  (policy: a fixture)

from core import branch_log
from core.causal_lm import Policy
from core.runstore import RunDir
from train_backend.advantage import compute_advantages
from train_backend.config import TreeSettings


def alternate(legal: list[str], index: int) -> str:
    """BET on even replies, PASS on odd ones, where legal: groups with both answers."""
    wanted = BET if index % 2 == 0 else PASS
    return wanted if wanted in legal else legal[0]


def test_each_branch_line_is_its_reply_action_return_and_advantage(policy: Policy) -> None:  # noqa: F811
    rollout = tree_step(policy, TreeSettings(branches=4), choose=alternate)
    table = {c: [row[c] for row in rollout.rows] for c in ("episode", "game", "seat", "turn")}
    table["reward"] = [row["reward"] for row in rollout.rows]
    advantages = compute_advantages(table, "at_grpo")
    trained = advantages != 0
    lines = branch_log.step_lines(3, rollout.rows, rollout.replies, advantages, trained)

    assert len(lines) == len(rollout.rows) > 0
    aligned = zip(lines, rollout.rows, rollout.samples, advantages, strict=True)
    for line, row, sample, adv in aligned:
        text = policy.decode(sample.completion_ids)
        assert line["reply"] in text  # the reply as the engine saw it (stop token decoded apart)
        assert line["action"] == (BET if BET in text else PASS)
        assert line["legal"] is True and line["step"] == 3
        assert "card" in line["observation"]  # the seat's own view: its Kuhn card
        assert line["return"] == row["reward"] and line["advantage"] == adv
        assert line["trained"] == (adv != 0)
        assert isinstance(line["reward"], float)
    groups = branch_log.groups_of(lines)
    assert {len(g) for g in groups.values()} == {4}
    for group in groups.values():
        assert sum(bool(b["chosen"]) for b in group) == 1
        assert len({b["state"] for b in group}) == 1
        assert sorted(b["branch"] for b in group) == [0, 1, 2, 3]
        assert sum(b["advantage"] for b in group) == pytest.approx(0.0, abs=1e-9)


def _line(group: str, state: str, reply: str, action: Any, ret: float, **extra: Any) -> dict:
    return {"group": group, "state": state, "reply": reply, "action": action, "return": ret} | extra


def test_collapse_signals_match_hand_computed_values() -> None:
    lines = [
        # a flat group whose four replies are one text: 3 repeats, one action
        *(_line("g1", "s1", "same", "BET", 1.0) for _ in range(4)),
        # a group with spread: two distinct texts, actions BET BET PASS and one invalid
        _line("g2", "s2", "a", "BET", 1.0),
        _line("g2", "s2", "a", "BET", -1.0),
        _line("g2", "s2", "b", "PASS", 0.0),
        _line("g2", "s2", "c", None, -2.0, legal=False),
        # a group of one: not a comparison, left out
        _line("g3", "s3", "x", "BET", 5.0),
    ]
    signals = branch_log.collapse_signals(lines)
    assert signals["branches/groups"] == 2
    assert signals["branches/flat_group_share"] == 0.5
    assert signals["branches/duplicate_reply_share"] == (3 + 1) / 8
    # s1: one action (0 bits); s2: BET 2/4, PASS 1/4, invalid 1/4 -> 1.5 bits
    assert signals["branches/action_entropy_bits"] == pytest.approx((0.0 + 1.5) / 2)
    assert branch_log.collapse_signals([_line("g", "s", "x", "BET", 0.0)]) == {}


def test_a_step_file_keeps_whole_groups_and_clipped_texts(tmp_path: Path) -> None:
    many = branch_log.MAX_GROUPS + 40
    lines = [
        branch_log.branch_line(
            step=7,
            game="kuhn_poker",
            episode=g,
            seat=0,
            turn=0,
            state=f"s{g}",
            branch=b,
            reply="r" * (branch_log.REPLY_CHARS * 3) if b == 0 else "short",
            ret=float(b),
            advantage=b - 1.5,
            trained=True,
        )
        for g in range(many)
        for b in range(4)
    ]
    path = branch_log.write_step(tmp_path, 7, lines)
    assert path == tmp_path / "branches" / "step_7.jsonl.gz"
    first = path.read_bytes()
    branch_log.write_step(tmp_path, 7, lines)
    assert path.read_bytes() == first  # the same lines make the same bytes
    read = branch_log.read_step(tmp_path, 7)
    sizes = Counter(line["group"] for line in read)
    assert len(sizes) == branch_log.MAX_GROUPS and set(sizes.values()) == {4}
    long = [line["reply"] for line in read if line["branch"] == 0]
    assert all(len(text) < branch_log.REPLY_CHARS + 60 for text in long)
    assert all(f"{2 * branch_log.REPLY_CHARS} characters" in text for text in long)
    assert [line["branch"] for line in read[:4]] == [0, 1, 2, 3]
    assert branch_log.write_step(tmp_path, 8, []) is None
    assert branch_log.logged_steps(tmp_path) == [7]

    # A file cut short by a kill: the lines before the cut are read, no error.
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[: len(raw) // 2]))
    partial = branch_log.read_step(tmp_path, 7)
    assert 0 < len(partial) < len(read)
    path.write_bytes(b"not gzip")
    assert branch_log.read_step(tmp_path, 7) == []


def test_the_cpu_trainer_logs_each_steps_branches_and_its_collapse_signals(tmp_path: Path) -> None:
    import torch

    from train_backend.config import TrainConfig
    from train_backend.local.trainer import LocalTrainer

    torch.set_num_threads(1)
    config = TrainConfig.for_local(
        games=["kuhn_poker"],
        prompt_style="compact",
        estimator="at_grpo",
        tree={"branches": 2},
        games_per_step=4,
        max_new_tokens=16,
        steps=2,
        save_every=1,
        eval_every=0,
    )
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="t")
    trainer = LocalTrainer(config, run, log=lambda _line: None)
    trainer.load()
    trainer.train()

    assert branch_log.logged_steps(run.path) == [1, 2]
    metrics = [json.loads(line) for line in (run.path / "metrics.jsonl").open()]
    for step, row in zip((1, 2), metrics, strict=True):
        lines = branch_log.read_step(run.path, step)
        assert lines and {line["step"] for line in lines} == {step}
        assert len(lines) == row["tree_branches"]
        assert {len(g) for g in branch_log.groups_of(lines).values()} == {2}
        for line in lines:
            assert line["trained"] == (line["advantage"] != 0.0)
            assert line["legal"] is False or line["action"] in (BET, PASS)
        signals = branch_log.collapse_signals(lines)
        assert signals and all(math.isclose(row[k], v) for k, v in signals.items())
        assert row["branches/flat_group_share"] == pytest.approx(row["tree_flat_group_share"])

    # A resume from step 1 drops step 2's file before playing it again.
    branch_log.remove_after(run.path, 1)
    assert branch_log.logged_steps(run.path) == [1]


def test_branch_signals_need_two_branches_of_a_group() -> None:
    assert branch_log.collapse_signals([]) == {}
    assert np.isfinite(
        branch_log.collapse_signals(
            [_line("g", "s", "x", "BET", 0.0), _line("g", "s", "y", "PASS", 1.0)]
        )["branches/action_entropy_bits"]
    )
