"""The summaries the commands really write hold only the fields `core.summaries` declares, so
the loop and the dashboard, which read them through those declarations, read what is there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars

from core.summaries import (
    ArenaSummary,
    EvalSummary,
    ExploitabilitySummary,
    SeatFigures,
    SuiteFigures,
    fields,
)
from harness.testing.scripted_server import Reply, ScriptedServer


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def _undeclared(summary: dict[str, Any], schema: type) -> set[str]:
    return set(summary) - set(schema.__annotations__)


def test_arena_and_exploitability_summaries_hold_only_declared_fields(tmp_path: Path) -> None:
    arena = run_mars(
        "arena", "--game", "kuhn_poker", "--player", "random", "--opponent", "cfr:20",
        "--episodes", "3", "--run-dir", str(tmp_path / "arena"), "--quiet",
    )  # fmt: skip
    assert arena.returncode == 0, arena.stderr
    summary = _summary(tmp_path / "arena")
    assert _undeclared(summary, ArenaSummary) == set()
    for seat in summary["seats"].values():
        assert _undeclared(seat, SeatFigures) == set()
        assert seat["n"] == 3

    exploit = run_mars(
        "exploitability", "--game", "kuhn_poker", "--player", "random", "--samples", "2",
        "--run-dir", str(tmp_path / "exploit"), "--quiet",
    )  # fmt: skip
    assert exploit.returncode == 0, exploit.stderr
    assert _undeclared(_summary(tmp_path / "exploit"), ExploitabilitySummary) == set()


def test_an_eval_summary_with_several_epochs_holds_only_declared_fields(tmp_path: Path) -> None:
    with ScriptedServer(lambda _request: Reply(text="The answer is \\boxed{18}.")) as server:
        done = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "3", "--epochs", "2",
            "--data-dir", str(DATA_DIR), "--base-url", server.base_url, "--model", "scripted",
            "--run-dir", str(tmp_path / "eval"), "--quiet",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = _summary(tmp_path / "eval")
    assert _undeclared(summary, EvalSummary) == set()
    suite = summary["suites"]["gsm8k"]
    assert _undeclared(suite, SuiteFigures) == set()
    assert {"maj_at_k", "pass_at"} <= set(suite)  # the several-epoch fields are there too


def test_a_reader_naming_a_field_the_schema_lacks_fails_at_once() -> None:
    assert fields(SeatFigures, "win", "loss") == ("win", "loss")
    with pytest.raises(TypeError, match="SeatFigures has no field wins"):
        fields(SeatFigures, "wins")
