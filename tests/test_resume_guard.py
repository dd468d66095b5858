"""The resume guard: a rerun into a run directory with other settings is refused in one line and
changes nothing on disk; the same settings (or only resumable ones changed) resume; a new path
starts fresh. Real CLI runs against the scripted server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars
from typer.testing import CliRunner

from core.runstore import RUN_FILE, RunDir, identity_changes
from dashboard import synthetic
from harness.testing.scripted_server import Reply, ScriptedServer

needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and mtime (ns)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _eval(server: ScriptedServer, run_dir: Path, *extra: str) -> list[str]:
    return [
        "eval", "--suite", "gsm8k", "--limit", "2", "--base-url", server.base_url,
        "--model", "scripted", "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir),
        "--quiet", *extra,
    ]  # fmt: skip


@needs_data
def test_an_eval_rerun_with_other_settings_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with ScriptedServer(lambda req: Reply(text="\\boxed{18}")) as server:
        first = run_mars(*_eval(server, run_dir))
        assert first.returncode == 0, first.stderr
        stored = json.loads((run_dir / RUN_FILE).read_text())["identity"]
        assert stored["mas"] == "single" and stored["model"] == "scripted"
        before, calls = snapshot(run_dir), len(server.seen)

        changed = run_mars(
            *_eval(server, run_dir, "--mas", "debate", "--temperature", "0.7", "--seed", "3")
        )
        assert changed.returncode == 2
        lines = changed.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in changed.stderr
        for change in (
            "mas single -> debate",
            "generation.temperature 0.0 -> 0.7",
            "generation.seed 0 -> 3",
        ):
            assert change in lines[0]
        assert "limit" not in lines[0]  # only what differs is named
        assert snapshot(run_dir) == before and len(server.seen) == calls

        other_model = run_mars(*_eval(server, run_dir)[:-1], "--model", "other", "--quiet")
        assert other_model.returncode == 2 and "model scripted -> other" in other_model.stderr
        assert snapshot(run_dir) == before and len(server.seen) == calls

        # How much and how fast may change: a bigger --limit resumes and runs only the new one.
        grown = run_mars(
            *[a if a != "2" else "3" for a in _eval(server, run_dir, "--concurrency", "3")]
        )
        assert grown.returncode == 0, grown.stderr
        assert "2 records kept, 1 to run" in grown.stdout
        assert len(server.seen) == calls + 1
        usage = json.loads((run_dir / "usage.json").read_text())  # added up, not overwritten
        assert usage["totals"]["calls"] == calls + 1 and usage["attempts"] == 2

        # A new path starts fresh with whatever settings it is given.
        fresh = run_mars(*_eval(server, tmp_path / "new", "--mas", "debate"))
        assert fresh.returncode == 0, fresh.stderr
        assert json.loads((tmp_path / "new" / RUN_FILE).read_text())["identity"]["mas"] == "debate"


@pytest.fixture
def cli() -> Any:
    from mars.main import app, register_commands

    register_commands()
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, list(args))

    return invoke


def test_an_arena_rerun_with_another_opponent_or_prompt_style_is_refused(
    cli: Any, tmp_path: Path
) -> None:
    run_dir = tmp_path / "arena"
    args = ["arena", "--game", "tic_tac_toe", "--player", "random", "--opponent", "random"]
    args += ["--episodes", "2", "--run-dir", str(run_dir), "--quiet"]
    assert cli(*args).exit_code == 0
    before = snapshot(run_dir)
    for change, named in (
        (["--opponent", "mcts:5"], "opponent random -> mcts:5"),
        (["--prompt-style", "compact"], "prompt_style full -> compact"),
    ):
        refused = cli(*args, *change)
        assert refused.exit_code != 0
        assert named in str(refused.exception)
        assert snapshot(run_dir) == before
    more = cli(*[a if a != "2" else "3" for a in args])  # more episodes: resumes
    assert more.exit_code == 0, more.output
    assert "4 records kept, 2 to run" in more.output


def test_failures_rerun_with_another_judge_setting_is_refused(cli: Any, tmp_path: Path) -> None:
    records = [synthetic.eval_record(i, correct=i % 2 == 0) for i in range(4)]
    run = synthetic.write_eval_run(tmp_path / "eval", records).path
    with ScriptedServer(lambda req: Reply(text='{"failure_modes": []}'), model="judge") as server:
        base = ["failures", str(run), "--base-url", server.base_url, "--quiet"]
        assert cli(*base, "--judge-model", "judge").exit_code == 0
        before, calls = snapshot(run), len(server.seen)
        refused = cli(*base, "--judge-model", "judge", "--max-tokens", "64")
        assert "generation.max_tokens 1024 -> 64" in str(refused.exception)
        refused = cli(*base, "--judge-model", "other")
        assert "judge_model judge -> other" in str(refused.exception)
        assert snapshot(run) == before and len(server.seen) == calls
        assert cli(*base, "--judge-model", "judge", "--all").exit_code == 0  # more transcripts
        assert len(server.seen) == calls + 2


def test_a_run_from_before_identities_adopts_the_current_one_with_a_note(
    cli: Any, tmp_path: Path
) -> None:
    run_dir = tmp_path / "old"
    args = ["arena", "--game", "tic_tac_toe", "--player", "random", "--opponent", "random"]
    args += ["--episodes", "1", "--run-dir", str(run_dir), "--quiet"]
    assert cli(*args).exit_code == 0
    info = json.loads((run_dir / RUN_FILE).read_text())
    del info["identity"]  # as an older mars wrote it
    (run_dir / RUN_FILE).write_text(json.dumps(info))
    again = cli(*args)
    assert again.exit_code == 0 and "has no stored settings" in again.output
    assert RunDir.open(run_dir).info().identity["opponent"] == "random"
    assert "has no stored settings" not in cli(*args).output  # adopted once, then guarded


def test_identity_changes_name_nested_added_and_removed_keys() -> None:
    old = {"mas": "mad", "generation": {"temperature": 0.0}, "mas_config": {"rounds": 2}}
    new = {"mas": "mad", "generation": {"temperature": 0.6}, "mas_config": {}, "grader": "judge"}
    assert identity_changes(old, new) == [
        "generation.temperature 0.0 -> 0.6",
        "grader (unset) -> judge",
        "mas_config.rounds 2 -> (unset)",
    ]
    assert identity_changes({"suites": ("a", "b")}, {"suites": ["a", "b"]}) == []
